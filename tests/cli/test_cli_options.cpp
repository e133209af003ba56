// slake-cli's option parsing (tools/cli/cli_options.cpp): llama-cli's spellings map to the long
// flags, values reach CliOptions, the checks that need no model refuse what cannot run. The
// shell tests beside this file (cli_errors.sh, cli_llama_flags.sh) run the binary end to end.
#include <gtest/gtest.h>

#include <cmath>

#include <string>
#include <vector>

#include "../../tools/cli/cli_options.h"
#include "slake/error.h"

namespace slake::cli {
namespace {

struct Parsed {
  CliOptions o;
  std::vector<std::string> notes;
};

// argv as llama-cli would take it, through the spellings, CLI11 and check_options.
Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "slake-cli");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  CLI::App app;
  add_cli_flags(app, p.o);
  std::vector<std::string> spelled = llama_cpp_spellings(static_cast<int>(argv.size()), argv.data(), &p.notes);
  app.parse(spelled);
  check_options(app, p.o);
  return p;
}

// The message of the slake::Error (or CLI11 error) these arguments raise; "" when they are taken.
std::string refused(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    return e.what();
  } catch (const CLI::Error& e) {
    return std::string("CLI11: ") + e.what();
  }
  return "";
}

TEST(CliOptions, LlamaCliSpellingsReachTheirOptions) {
  const Parsed p = parse({"-m", "m.gguf", "-sys", "Be brief.", "-cnv", "-n", "12", "-c", "1024", "-t", "3", "-s", "7",
                          "--temp", "0.3", "--top-k", "5", "-r", "User:", "-r", "###"});
  EXPECT_EQ(p.o.model_path, "m.gguf");
  EXPECT_EQ(p.o.system_prompt, "Be brief.");
  EXPECT_TRUE(p.o.conversation);
  EXPECT_EQ(p.o.n_predict, 12);
  EXPECT_EQ(p.o.n_ctx, 1024);
  EXPECT_EQ(p.o.n_threads, 3);
  EXPECT_EQ(p.o.seed, 7);
  EXPECT_FLOAT_EQ(p.o.sampling.temp, 0.3f);
  EXPECT_EQ(p.o.sampling.top_k, 5);
  EXPECT_EQ(p.o.reverse_prompts, (std::vector<std::string>{"User:", "###"}));
  EXPECT_TRUE(uses_chat(p.o));
  EXPECT_FALSE(uses_chat(parse({"-m", "m.gguf", "-p", "hello"}).o));
}

TEST(CliOptions, FlagsThatChangeNothingHereAreDroppedWithANote) {
  const Parsed p = parse({"-m", "m.gguf", "-no-cnv", "-p", "hi"});
  EXPECT_FALSE(p.o.conversation);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("-no-cnv"), std::string::npos) << p.notes[0];
}

TEST(CliOptions, KvFlagsResolveIntoThePolicyParams) {
  const Parsed p = parse({"-m", "m.gguf", "--kv-policy", "snapkv", "--kv-budget", "256", "--kv-observe", "32", "-ctk", "q8_0",
                          "-ctv", "f32", "--kv-tau1", "2"});
  EXPECT_EQ(p.o.kv.params.policy, "snapkv");
  EXPECT_EQ(p.o.kv.params.budget, 256);
  EXPECT_EQ(p.o.kv.params.observe, 32);
  EXPECT_EQ(p.o.kv.params.type_k, KvType::Q8_0);
  EXPECT_EQ(p.o.kv.params.type_v, KvType::F32);
  ASSERT_TRUE(p.o.kv.params.tau1.has_value());
  EXPECT_DOUBLE_EQ(*p.o.kv.params.tau1, 2.0);
  // An exponent not given stays unset, for the model's defaults to fill.
  EXPECT_FALSE(p.o.kv.params.tau2.has_value());
}

TEST(CliOptions, WhatCannotRunIsRefusedBeforeTheModelLoads) {
  EXPECT_NE(refused({"-m", "m.gguf", "-p", "a", "-f", "b.txt"}).find("not both"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "-n", "-2"}).find("-n must be"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "-s", "-5"}).find("--seed"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "-cnv", "-f", "-"}).find("standard input"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "-p", "a"}).find("--batch"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--temp", "0.8"}).find("greedily"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--batch-out", "o.jsonl"}).find("--batch-out needs --batch"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-sweep", "cake/none/64"}).find("--kv-sweep needs --batch"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--grammar", "root ::= \"a\"", "-j", "{}"}).find("give one of"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--grammar", "root ::= undefined-rule"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--chat-template", "no-such-format"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--jinja", "--chat-template", "chatml"}).find("--jinja"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "-ctk", "q3_k"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "cake/none/notanumber"}), "");
  EXPECT_EQ(refused({"-p", "no model"}).rfind("CLI11: ", 0), 0u);  // -m is required
  EXPECT_EQ(refused({"-m", "m.gguf", "-c", "-1"}).rfind("CLI11: ", 0), 0u);
  // The recall store: only where something is evicted, and its settings only with pages to recall.
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-recall-pages", "8"}).find("needs an evicting policy"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-store-type", "q4_0"}).find("needs --kv-recall-pages"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-score", "quest"}).find("needs --kv-recall-pages"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-every", "4"}).find("needs --kv-recall-pages"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-pages", "8", "--kv-recall-every", "0"}), "");
  EXPECT_EQ(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-pages", "8", "--kv-recall-every", "4"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-pages", "8", "--kv-store-type", "kivi4"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "full/none/0", "--kv-recall-pages", "8"}).find("none would recall"),
            std::string::npos);
  EXPECT_EQ(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "full/none/0,cake/none/64", "--kv-recall-pages", "8"}), "");
  EXPECT_EQ(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-pages", "8", "--kv-recall-score", "quest", "--kv-store-type", "q4_0"}), "");
  // --kv-store-file: a directory that exists, and a store to keep in it.
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-store-file", "/tmp"}).find("needs --kv-recall-pages"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-pages", "8", "--kv-store-file", "/nonexistent-dir"}), "");
  EXPECT_EQ(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-recall-pages", "8", "--kv-store-file", "/tmp"}), "");
  // AhaKV: its parts only where it scores, spelled as they are named.
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-ahakv", "gain"}).find("needs --kv-policy ahakv"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-policy", "ahakv", "--kv-budget", "256", "--kv-ahakv", "gain,value"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-policy", "streaming", "--kv-budget", "256", "--kv-selector", "ahakv"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "cake:gain/none/64"}).find("need the policy ahakv"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "cake@oracle/none/64"}).find("selector"), std::string::npos);
  EXPECT_EQ(refused({"-m", "m.gguf", "--kv-policy", "cake", "--kv-selector", "ahakv", "--kv-budget", "256", "--kv-ahakv", "value+gain"}), "");
  EXPECT_EQ(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "ahakv/none/64,ahakv:recent+value/none/64,cake@ahakv:none/taylor/128"}), "");
  // SRE: a compensated policy only.
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-policy", "cake", "--kv-budget", "256", "--kv-sre-mass", "0.9"}).find("compensate"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-sre-mass", "1.5"}), "");
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-sre-floor", "8"}).find("needs --kv-sre-mass"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-sre-mass", "0.5"}).find("needs a --kv-budget"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--kv-selector", "ahakv"}).find("needs a --kv-budget"), std::string::npos);
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "slake@sre:2/auto/64"}).find("SRE-mass"), std::string::npos);
  EXPECT_EQ(refused({"-m", "m.gguf", "--kv-budget", "256", "--kv-sre-mass", "0.9", "--kv-sre-floor", "16"}), "");
  EXPECT_EQ(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "slake@sre:0.9/auto/256,cake@sre/taylor/128"}), "");
  // And the same flags, well formed, are taken.
  EXPECT_EQ(refused({"-m", "m.gguf", "--batch", "r.jsonl", "--kv-sweep", "cake/none/64,slake/auto/128"}), "");
  EXPECT_EQ(refused({"-m", "m.gguf", "-j", R"({"type": "object"})"}), "");
}

TEST(CliOptions, LogitBiasesAreLlamaCppsTokenSignBias) {
  const Parsed p = parse({"-m", "m.gguf", "-l", "15043+1.5", "--logit-bias", "7-inf", "-l", "9-0.25"});
  ASSERT_EQ(p.o.logit_bias.size(), 3u);
  EXPECT_EQ(p.o.logit_bias[0], (std::pair<int32_t, float>{15043, 1.5f}));
  EXPECT_EQ(p.o.logit_bias[1].first, 7);
  EXPECT_TRUE(std::isinf(p.o.logit_bias[1].second) && p.o.logit_bias[1].second < 0);
  EXPECT_EQ(p.o.logit_bias[2], (std::pair<int32_t, float>{9, -0.25f}));
  for (const char* bad : {"abc", "15", "15*1", "15+", "+1", "15+x", "15--1", "15+1x", "15+nan", "15+inf", "1234567890+1"})
    EXPECT_NE(refused({"-m", "m.gguf", "-l", bad}).find("--logit-bias"), std::string::npos) << bad;
  EXPECT_NE(refused({"-m", "m.gguf", "--batch", "r.jsonl", "-l", "5+1"}).find("--logit-bias"), std::string::npos);
  std::vector<float> logits = {1, 2, 3};
  tools::apply_logit_bias(logits.data(), {{0, 0.5f}, {2, -100.0f}});
  EXPECT_EQ(logits[0], 1.5f);
  EXPECT_EQ(logits[1], 2.0f);
  EXPECT_TRUE(std::isinf(logits[2]) && logits[2] < 0);
}

TEST(CliOptions, AJsonSchemaBecomesTheGrammarOfTheReply) {
  const Parsed p = parse({"-m", "m.gguf", "-j", R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})"});
  EXPECT_FALSE(p.o.gbnf.empty());
  EXPECT_NE(p.o.gbnf.find("root"), std::string::npos);
  EXPECT_EQ(parse({"-m", "m.gguf", "--grammar", "root ::= \"yes\""}).o.gbnf, "root ::= \"yes\"");
}

}  // namespace
}  // namespace slake::cli
