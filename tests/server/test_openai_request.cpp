// The request parsing of slake-server (tools/server/openai_request.cpp) on stories260K's vocabulary:
// every field reaches the GenRequest it names, and every bad field is a 400 naming it. The
// end-to-end tests (test_server.py and the others beside this file) go through HTTP and the
// official clients; these pin the parser's own rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "../../tools/server/api_error.h"
#include "../../tools/server/openai_request.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"
#include "test_util.h"

namespace slake::server {
namespace {

class OpenAiRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_STORIES_OR_SKIP(dir);
    model_ = load_model(dir + "stories260K.gguf");
    tokenizer_ = std::make_unique<Tokenizer>(model_->vocab);
    chat_ = std::make_unique<ChatPrompter>(*tokenizer_, "chatml", "");
    env_ = std::make_unique<RequestEnv>(RequestEnv{"stories", *tokenizer_, *chat_, model_->cfg, 256, KvPolicyParams{},
                                                   longest_piece_bytes(tokenizer_->vocab())});
  }
  ApiRequest completion(const std::string& fields) {
    return parse_request(R"({"prompt": "Once upon a time")" + (fields.empty() ? "" : ", " + fields) + "}", false, *env_);
  }
  // The 400 a completion request with these extra fields gets: its param, or "" when it was taken.
  std::string refused_param(const std::string& fields, bool chat = false) {
    const std::string body = chat ? R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}"
                                  : R"({"prompt": "Once upon a time", )" + fields + "}";
    try {
      parse_request(body, chat, *env_);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      return e.param.empty() ? "(no param)" : e.param;
    }
    return "";
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatPrompter> chat_;
  std::unique_ptr<RequestEnv> env_;
};

TEST_F(OpenAiRequest, SamplingFieldsReachTheRequest) {
  const ApiRequest r = completion(R"("temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.1, "seed": 42, "max_tokens": 5,
                                     "repeat_penalty": 1.1, "stop": ["\n", "The end"], "ignore_eos": true, "logprobs": 3)");
  EXPECT_FLOAT_EQ(r.gen.sampling.temp, 0.5f);
  EXPECT_EQ(r.gen.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.1f);
  EXPECT_EQ(r.gen.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(r.gen.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r.gen.max_tokens, 5);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"\n", "The end"}));
  EXPECT_TRUE(r.gen.ignore_eos);
  EXPECT_EQ(r.gen.top_logprobs, 3);
  EXPECT_TRUE(r.logprobs);
  EXPECT_FALSE(r.chat);
  // The prompt is the tokenizer's, with the vocabulary's BOS.
  EXPECT_EQ(r.gen.prompt, tokenizer_->tokenize("Once upon a time", tokenizer_->vocab().add_bos, true));
}

TEST_F(OpenAiRequest, PromptAsTokenIds) {
  const ApiRequest r = parse_request(R"({"prompt": [1, 2, 3, 4]})", false, *env_);
  EXPECT_EQ(r.gen.prompt, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(refused_param(R"("prompt2": 1)"), "prompt2");
  try {
    parse_request(R"({"prompt": [1, )" + std::to_string(model_->cfg.n_vocab) + "]}", false, *env_);
    FAIL() << "a token id past the vocabulary was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "prompt");
  }
}

TEST_F(OpenAiRequest, EveryUnknownOrMisplacedFieldIsRefusedByName) {
  EXPECT_EQ(refused_param(R"("frobnicate": 1)"), "frobnicate");
  EXPECT_EQ(refused_param(R"("functions": [])", true), "functions");  // OpenAI's deprecated form
  EXPECT_EQ(refused_param(R"("tools": [])"), "tools");                // chat only
  EXPECT_EQ(refused_param(R"("messages": [])"), "messages");          // chat only
  EXPECT_EQ(refused_param(R"("echo": true)"), "echo");
  EXPECT_EQ(refused_param(R"("n": 0)"), "n");
  EXPECT_EQ(refused_param(R"("n": 9)"), "n");  // kMaxChoices
  EXPECT_EQ(refused_param(R"("n": 1.5)"), "n");
  EXPECT_EQ(completion(R"("n": 8)").n, 8);
  EXPECT_EQ(completion("").n, 1);
  EXPECT_EQ(refused_param(R"("best_of": 2)"), "best_of");
}

TEST_F(OpenAiRequest, ValuesOutOfRangeAreRefusedByName) {
  EXPECT_EQ(refused_param(R"("temperature": -0.5)"), "temperature");
  EXPECT_EQ(refused_param(R"("temperature": "hot")"), "temperature");
  EXPECT_EQ(refused_param(R"("top_p": 0)"), "top_p");
  EXPECT_EQ(refused_param(R"("top_k": -1)"), "top_k");
  EXPECT_EQ(refused_param(R"("max_tokens": -2)"), "max_tokens");
  EXPECT_EQ(refused_param(R"("mirostat": 1)"), "mirostat");
  EXPECT_EQ(refused_param(R"("stop": ["a", "b", "c", "d", "e"])"), "stop");
  EXPECT_EQ(refused_param(R"("logit_bias": {"-1": 5})"), "logit_bias");
  EXPECT_EQ(refused_param(R"("logit_bias": {"3": 101})"), "logit_bias");
  EXPECT_EQ(refused_param(R"("top_logprobs": 2)", true), "top_logprobs");  // needs logprobs: true
  EXPECT_EQ(refused_param(R"("kv_budget": -1)"), "kv_budget");
  EXPECT_EQ(refused_param(R"("kv_policy": "everything")"), "kv_policy");
  EXPECT_EQ(refused_param(R"("kv_window": 0)"), "kv_window");
  EXPECT_EQ(refused_param(R"("kv_recall_pages": 8)"), "kv_recall_pages");  // nothing evicted: nothing to recall
  EXPECT_EQ(refused_param(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_recall_pages": -1)"), "kv_recall_pages");
  EXPECT_EQ(refused_param(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_recall_pages": 8, "kv_store_type": "q5_9")"), "kv_store_type");
  EXPECT_EQ(refused_param(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_recall_pages": 8, "kv_recall_score": "psychic")"), "kv_recall_score");
  EXPECT_EQ(refused_param(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_recall_pages": 8, "kv_store_type": "kivi4")"), "kv_store_type");
  EXPECT_EQ(refused_param(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_store_type": "q4_0")"), "kv_store_type");  // no recall pages
  EXPECT_EQ(refused_param(R"("kv_recall_score": "quest")"), "kv_recall_score");
  EXPECT_EQ(refused_param(R"("kv_recall_every": 4)"), "kv_recall_every");  // nothing recalled
  EXPECT_EQ(refused_param(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_recall_pages": 8, "kv_recall_every": 0)"), "kv_recall_every");
  EXPECT_EQ(refused_param(R"("kv_policy": "cake", "kv_budget": 64, "kv_selector": "oracle")"), "kv_selector");
  EXPECT_EQ(refused_param(R"("kv_policy": "streaming", "kv_budget": 64, "kv_selector": "ahakv")"), "kv_selector");
  EXPECT_EQ(refused_param(R"("kv_policy": "ahakv", "kv_budget": 64, "kv_ahakv": "gain+bias")"), "kv_ahakv");
  EXPECT_EQ(refused_param(R"("kv_policy": "cake", "kv_budget": 64, "kv_ahakv": "gain")"), "kv_ahakv");  // AhaKV does not score
  EXPECT_EQ(refused_param(R"("kv_policy": "ahakv", "kv_budget": 64, "kv_ahakv": "gain", "kv_prefill_chunk": 128)"), "kv_policy");
  EXPECT_EQ(refused_param(R"("kv_policy": "slake", "kv_budget": 64, "kv_sre_mass": 1.5)"), "kv_sre_mass");
  EXPECT_EQ(refused_param(R"("kv_policy": "cake", "kv_budget": 64, "kv_sre_mass": 0.9)"), "kv_sre_mass");  // no compensator
  EXPECT_EQ(refused_param(R"("kv_policy": "slake", "kv_budget": 64, "kv_sre_floor": -1)"), "kv_sre_floor");
  EXPECT_EQ(refused_param(R"("kv_policy": "slake", "kv_budget": 64, "kv_sre_floor": 8)"), "kv_sre_floor");  // no kv_sre_mass
  EXPECT_EQ(refused_param(R"("kv_sre_mass": 0.5)"), "kv_sre_mass");  // nothing evicted
  EXPECT_EQ(refused_param(R"("kv_selector": "ahakv")"), "kv_selector");
  // Two grammars at once.
  EXPECT_EQ(refused_param(R"("grammar": "root ::= \"a\"", "response_format": {"type": "json_object"})"), "response_format");
  EXPECT_EQ(refused_param(R"("grammar": "root ::= undefined-rule")"), "grammar");
  // A prompt the context cannot hold (n_ctx 256).
  std::string ids = "1";
  for (int i = 0; i < 300; ++i) ids += ", 1";
  try {
    parse_request(R"({"prompt": [)" + ids + "]}", false, *env_);
    FAIL() << "a prompt longer than the context was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "prompt");
  }
}

TEST_F(OpenAiRequest, BodiesThatAreNotOneJsonObjectAreRefused) {
  for (const std::string& body : std::vector<std::string>{"", "[]", "42", "{\"prompt\": \"a\"", std::string("{\"prompt\": \"a\"}\0x", 18)}) {
    try {
      parse_request(body, false, *env_);
      FAIL() << "taken: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
    }
  }
}

TEST_F(OpenAiRequest, LogitBiasAndGrammarsReachTheRequest) {
  const ApiRequest r = completion(R"("logit_bias": {"5": -100, "17": 2.5})");
  std::vector<std::pair<int32_t, float>> bias = r.gen.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {17, 2.5f}}));
  EXPECT_EQ(r.gen.grammar, nullptr);
  EXPECT_NE(completion(R"("response_format": {"type": "json_object"})").gen.grammar, nullptr);
  EXPECT_NE(completion(R"("grammar": "root ::= \"yes\" | \"no\"")").gen.grammar, nullptr);
  EXPECT_EQ(completion(R"("response_format": {"type": "text"})").gen.grammar, nullptr);
}

// The KV fields become the policy resolve_kv_policy makes of them, on top of the server's flags;
// the slot compares the resolved policies to decide whether its cache can be kept.
TEST_F(OpenAiRequest, KvFieldsResolveAsTheFlagsDo) {
  KvPolicyParams budget_alone;
  budget_alone.budget = 64;
  EXPECT_EQ(completion(R"("kv_budget": 64)").gen.kv, resolve_kv_policy(budget_alone, true, &model_->cfg));
  EXPECT_EQ(completion(R"("kv_budget": 64)").gen.kv.policy, "slake");  // a budget alone means slake

  KvPolicyParams snap;
  snap.policy = "snapkv";
  snap.budget = 64;
  snap.observe = 8;
  snap.window = 16;
  const KvPolicyParams got = completion(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_observe": 8, "kv_window": 16)").gen.kv;
  EXPECT_EQ(got, resolve_kv_policy(snap, false, &model_->cfg));
  EXPECT_EQ(got.observe, 8);
  EXPECT_EQ(got.window, 16);
  // Each field alone changes the policy: a slot must not keep a cache made under another one.
  EXPECT_NE(got, completion(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_observe": 4, "kv_window": 16)").gen.kv);
  EXPECT_NE(got, completion(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_observe": 8, "kv_window": 8)").gen.kv);
  EXPECT_NE(got, completion(R"("kv_policy": "snapkv", "kv_budget": 96, "kv_observe": 8, "kv_window": 16)").gen.kv);
  EXPECT_NE(got, completion(R"("kv_policy": "cake", "kv_budget": 64, "kv_observe": 8, "kv_window": 16)").gen.kv);
  const KvPolicyParams recall =
      completion(R"("kv_policy": "snapkv", "kv_budget": 64, "kv_observe": 8, "kv_window": 16, "kv_recall_pages": 8, "kv_store_type": "q4_0", "kv_recall_score": "quest")").gen.kv;
  EXPECT_EQ(recall.recall().pages, 8);
  EXPECT_EQ(recall.store_type, KvType::Q4_0);
  EXPECT_EQ(recall.recall_score, RecallScore::Quest);
  EXPECT_EQ(recall.recall().every, 1);
  EXPECT_NE(got, recall);
  // A request's kv_recall_every reaches the cache's recall settings and makes a policy of its own.
  const KvPolicyParams held = completion(
      R"("kv_policy": "snapkv", "kv_budget": 64, "kv_observe": 8, "kv_window": 16, "kv_recall_pages": 8, "kv_store_type": "q4_0", "kv_recall_score": "quest", "kv_recall_every": 6)")
                                  .gen.kv;
  EXPECT_EQ(held.recall().every, 6);
  EXPECT_NE(held, recall);
  // AhaKV as a policy and as CAKE's selector, with its parts.
  const KvPolicyParams aha = completion(R"("kv_policy": "ahakv", "kv_budget": 64, "kv_ahakv": "value+recent")").gen.kv;
  EXPECT_EQ(aha.policy, "ahakv");
  EXPECT_EQ(aha.aha, (AhaParts{false, true, true}));
  const KvPolicyParams cake_aha = completion(R"("kv_policy": "cake", "kv_budget": 64, "kv_selector": "ahakv")").gen.kv;
  EXPECT_EQ(kv_policy_label(cake_aha), "cake@ahakv");
  EXPECT_NE(cake_aha, completion(R"("kv_policy": "cake", "kv_budget": 64)").gen.kv);
  EXPECT_NE(cake_aha, completion(R"("kv_policy": "cake", "kv_budget": 64, "kv_selector": "ahakv", "kv_ahakv": "gain")").gen.kv);
  const KvPolicyParams sre = completion(R"("kv_policy": "slake", "kv_budget": 64, "kv_sre_mass": 0.8, "kv_sre_floor": 4)").gen.kv;
  EXPECT_EQ(kv_policy_label(sre), "slake@sre:0.8");
  EXPECT_EQ(sre.sre_floor, 4);

  // A server whose own policy ranks by AhaKV: a request naming another policy gets that policy's
  // own scores (streaming is not refused), one naming none keeps the server's.
  {
    KvPolicyParams dflt;
    dflt.policy = "cake";
    dflt.budget = 64;
    dflt.selector = "ahakv";
    env_->kv_default = dflt;
    EXPECT_EQ(completion(R"("kv_policy": "streaming", "kv_budget": 64)").gen.kv.selector, "auto");
    EXPECT_EQ(completion(R"("kv_budget": 96)").gen.kv.selector, "ahakv");
    env_->kv_default = KvPolicyParams{};
  }
  // No KV field: the server's own flags, resolved.
  KvPolicyParams flags;
  flags.policy = "cake";
  flags.budget = 48;
  env_->kv_default = flags;
  EXPECT_EQ(completion("").gen.kv, resolve_kv_policy(flags, false, &model_->cfg));
}

TEST_F(OpenAiRequest, ChatMessagesGoThroughTheTemplate) {
  const ApiRequest r = parse_request(R"({"messages": [{"role": "system", "content": "Be brief."},
                                                      {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                                         "logprobs": true, "top_logprobs": 2})",
                                     true, *env_);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_EQ(r.gen.prompt, chat_->tokens({{"system", "Be brief."}, {"user", "Hi"}}));
  try {
    parse_request(R"({"messages": [{"role": "wizard", "content": "hi"}]})", true, *env_);
    FAIL() << "an unknown role was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param.rfind("messages", 0), 0u) << e.param;
  }
}

}  // namespace
}  // namespace slake::server
