// End-to-end logits against Hugging Face transformers. models/make_test_models.py wrote each tiny
// random model as safetensors (save_pretrained) and as GGUF (the gguf package, llama.cpp's names
// and Q/K permutation), with transformers' fp32 logits for a 64-token prompt at every position.
#include <gmock/gmock.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "slake/context.h"
#include "slake/format/mapped_file.h"
#include "slake/model/model.h"
#include "slake/model/moe.h"
#include "slake/quant/dtype.h"
#include "test_util.h"

namespace slake {
namespace {

struct Reference {
  std::vector<int32_t> tokens;
  int n_vocab = 0;
  std::vector<float> logits;  // [tokens][n_vocab]
};

Reference load_reference(const std::string& dir) {
  Reference r;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir + "/reference.json"));
  r.tokens = j["tokens"].get<std::vector<int32_t>>();
  r.n_vocab = j["n_vocab"].get<int>();
  r.logits = test::read_f32(dir + "/logits.f32");
  return r;
}

// max |a - b| over the rows [row0, row0 + rows) of the reference, relative to max |reference|.
double relative_error(const std::vector<float>& got, const Reference& ref, int row0, int rows) {
  double max_diff = 0, max_ref = 0;
  for (int t = 0; t < rows; ++t)
    for (int v = 0; v < ref.n_vocab; ++v) {
      const double want = ref.logits[static_cast<size_t>((row0 + t) * ref.n_vocab + v)];
      const double g = got[static_cast<size_t>(t * ref.n_vocab + v)];
      max_diff = std::max(max_diff, std::abs(g - want));
      max_ref = std::max(max_ref, std::abs(want));
    }
  return max_diff / max_ref;
}

struct Case {
  std::string model;
  std::string format;  // "gguf" or "hf"
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.model + "_" + info.param.format;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class ForwardReference : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = test::fixtures_dir() + "/models/" + GetParam().model;
    ref_ = load_reference(dir_);
    model_ = load_model(GetParam().format == "gguf" ? dir_ + "/model.gguf" : dir_ + "/hf");
    ASSERT_EQ(model_->cfg.n_vocab, ref_.n_vocab);
  }
  std::string dir_;
  Reference ref_;
  std::unique_ptr<Model> model_;
};

constexpr double kTolerance = 1e-4;

TEST_P(ForwardReference, PrefillLogitsMatchTransformers) {
  for (int n_batch : {64, 7}) {
    for (int threads : {1, 2}) {
      Context ctx(*model_, test::f32_cache(/*n_ctx=*/64, threads, n_batch));
      std::vector<float> logits;
      ctx.eval(ref_.tokens, &logits, /*all_logits=*/true);
      const double err = relative_error(logits, ref_, 0, static_cast<int>(ref_.tokens.size()));
      EXPECT_LE(err, kTolerance) << "n_batch " << n_batch << ", threads " << threads;
    }
  }
}

TEST_P(ForwardReference, DecodeLogitsMatchTransformers) {
  Context ctx(*model_, test::f32_cache(64, 2, 16));
  const int n_prompt = 40, n = static_cast<int>(ref_.tokens.size());
  std::vector<float> logits;
  ctx.eval(std::vector<int32_t>(ref_.tokens.begin(), ref_.tokens.begin() + n_prompt), &logits, false);
  EXPECT_LE(relative_error(logits, ref_, n_prompt - 1, 1), kTolerance);
  for (int t = n_prompt; t < n; ++t) {
    ctx.eval({ref_.tokens[static_cast<size_t>(t)]}, &logits);
    ASSERT_LE(relative_error(logits, ref_, t, 1), kTolerance) << "decode position " << t;
  }
  EXPECT_EQ(ctx.n_past(), n);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ForwardReference,
    ::testing::Values(Case{"llama2-mha", "gguf"}, Case{"llama2-mha", "hf"}, Case{"llama-gqa-tied", "gguf"},
                      Case{"llama-gqa-tied", "hf"}, Case{"llama31-rope-scaling", "gguf"}, Case{"llama31-rope-scaling", "hf"},
                      Case{"mistral-swa", "gguf"}, Case{"mistral-swa", "hf"}, Case{"llama2-mha-f16", "gguf"},
                      Case{"llama2-mha-f16", "hf"}, Case{"llama2-mha-bf16", "gguf"}, Case{"llama2-mha-bf16", "hf"},
                      Case{"llama2-mha-q8_0", "gguf"}, Case{"llama2-mha-q4_0", "gguf"}, Case{"qwen2-bias", "gguf"},
                      Case{"qwen2-bias", "hf"}, Case{"qwen3-qknorm", "gguf"}, Case{"qwen3-qknorm", "hf"},
                      Case{"gemma3-swa", "gguf"}, Case{"gemma3-swa", "hf"}, Case{"phi3-longrope", "gguf"},
                      Case{"phi3-longrope", "hf"}, Case{"mixtral-moe", "gguf"}, Case{"mixtral-moe", "hf"},
                      Case{"qwen3-moe", "gguf"}, Case{"qwen3-moe", "hf"}, Case{"qwen2-moe", "gguf"}, Case{"qwen2-moe", "hf"},
                      Case{"gemma2-softcap", "gguf"}, Case{"gemma2-softcap", "hf"}),
    case_name);

// The router's rule (moe_route) on transformers' own router logits picks the experts transformers
// picked, in its order, for every token of every layer of the mixtures (Qwen2-MoE's weights are
// not renormalised: their sum is below 1). (That the engine's router
// sees the same logits is what the logits tests above hold: one token sent to another expert moves
// its logits far beyond their tolerance.)
TEST(ForwardReferenceFixtures, RouterPicksTransformersExperts) {
  for (const char* name : {"mixtral-moe", "qwen3-moe", "qwen2-moe"}) {
    const bool renormalise = std::string(name) != "qwen2-moe";
    const nlohmann::json j = nlohmann::json::parse(read_text_file(test::fixtures_dir() + "/models/" + name + "/reference.json"));
    const auto logits = j["router_logits"].get<std::vector<std::vector<std::vector<float>>>>();
    const auto want = j["experts"].get<std::vector<std::vector<std::vector<int>>>>();
    ASSERT_EQ(logits.size(), 2u) << name;
    int checked = 0;
    for (size_t l = 0; l < logits.size(); ++l)
      for (size_t t = 0; t < logits[l].size(); ++t) {
        ExpertChoice got[2];
        moe_route(logits[l][t].data(), 4, 2, renormalise, got);
        ASSERT_EQ((std::vector<int>{got[0].expert, got[1].expert}), want[l][t]) << name << " layer " << l << " token " << t;
        if (renormalise) EXPECT_NEAR(got[0].weight + got[1].weight, 1.0f, 1e-6f);
        else EXPECT_LT(got[0].weight + got[1].weight, 1.0f);
        EXPECT_GE(got[0].weight, got[1].weight);
        ++checked;
      }
    EXPECT_EQ(checked, 2 * 64) << name;
  }
}

// The fixtures really cover what they claim: the loader sees the features under test.
TEST(ForwardReferenceFixtures, CoverTheFeatures) {
  const std::string d = test::fixtures_dir() + "/models/";
  auto gqa = load_model(d + "llama-gqa-tied/hf");
  EXPECT_TRUE(gqa->cfg.tied_output);
  EXPECT_EQ(gqa->cfg.group_size(), 4);
  EXPECT_TRUE(test::exists(d + "llama-gqa-tied/hf/model.safetensors.index.json"));
  EXPECT_FALSE(load_model(d + "llama2-mha/model.gguf")->cfg.tied_output);
  for (const char* f : {"llama31-rope-scaling/hf", "llama31-rope-scaling/model.gguf"}) {
    auto m = load_model(d + f);
    ASSERT_EQ(m->cfg.rope_freq_factors.size(), 8u) << f;
    EXPECT_FLOAT_EQ(m->cfg.rope_freq_factors.front(), 1.0f) << f;
    EXPECT_FLOAT_EQ(m->cfg.rope_freq_factors.back(), 8.0f) << f;
  }
  EXPECT_EQ(load_model(d + "mistral-swa/hf")->cfg.sliding_window, 16);
  EXPECT_EQ(load_model(d + "mistral-swa/model.gguf")->cfg.sliding_window, 16);
  EXPECT_EQ(load_model(d + "llama2-mha-q4_0/model.gguf")->layers[0].wq.type, DType::Q4_0);
  EXPECT_EQ(load_model(d + "llama2-mha-bf16/hf")->layers[0].wq.type, DType::BF16);
  // The families: their architecture, their layer's extra tensors, rotate-half RoPE in both
  // formats (llama.cpp's converter does not permute Qwen's Q/K rows), Qwen3's own head_dim.
  for (const char* f : {"qwen2-bias/hf", "qwen2-bias/model.gguf"}) {
    auto m = load_model(d + f);
    EXPECT_EQ(m->cfg.arch, "qwen2") << f;
    EXPECT_TRUE(m->cfg.qkv_bias && !m->cfg.qk_norm) << f;
    EXPECT_EQ(m->cfg.rope_layout, RopeLayout::Half) << f;
    EXPECT_EQ(m->layers[1].bk.ne, std::vector<int64_t>{m->cfg.kv_dim()}) << f;
  }
  for (const char* f : {"qwen3-qknorm/hf", "qwen3-qknorm/model.gguf"}) {
    auto m = load_model(d + f);
    EXPECT_EQ(m->cfg.arch, "qwen3") << f;
    EXPECT_TRUE(m->cfg.qk_norm && !m->cfg.qkv_bias) << f;
    EXPECT_EQ(m->cfg.rope_layout, RopeLayout::Half) << f;
    EXPECT_EQ(m->cfg.head_dim, 32) << f;
    EXPECT_NE(m->cfg.head_dim * m->cfg.n_heads, m->cfg.dim) << f;
    EXPECT_EQ(m->layers[0].q_norm.ne, std::vector<int64_t>{32}) << f;
  }
  // Phi-3: the fused tensors split into views of their rows; LongRoPE's short and long divisors,
  // chosen by the context against the original 32, and cos and sin scaled by transformers'
  // attention factor sqrt(1 + ln(128 / 32) / ln 32).
  for (const char* f : {"phi3-longrope/hf", "phi3-longrope/model.gguf"}) {
    auto m = load_model(d + f);
    const ModelConfig& c = m->cfg;
    EXPECT_EQ(c.arch, "phi3") << f;
    EXPECT_EQ(c.rope_layout, RopeLayout::Half) << f;
    EXPECT_EQ(m->layers[0].wk.ne, (std::vector<int64_t>{64, 32})) << f;
    EXPECT_EQ(m->layers[0].wk.data, m->layers[0].wq.data + 64 * 64 * sizeof(float)) << f;
    EXPECT_EQ(m->layers[0].w_up.data, m->layers[0].w_gate.data + 128 * 64 * sizeof(float)) << f;
    EXPECT_EQ(c.n_ctx_orig, 32) << f;
    EXPECT_FLOAT_EQ(c.rope_factors_for(32).back(), 1.6f) << f;
    EXPECT_FLOAT_EQ(c.rope_factors_for(33).back(), 20.0f) << f;
    EXPECT_NEAR(c.rope_attn_factor, std::sqrt(1.0 + std::log(4.0) / std::log(32.0)), 1e-6) << f;
    EXPECT_EQ(Rope(c, 64).inv_freq().back(), std::pow(10000.0, -14.0 / 16) / 20.0) << f;
  }
  // The mixtures: four experts, two per token, each expert a view of the file's stacked tensors
  // (GGUF) or its own tensor (HF); Qwen3-MoE's experts have their own width.
  for (const char* f : {"mixtral-moe/hf", "mixtral-moe/model.gguf", "qwen3-moe/hf", "qwen3-moe/model.gguf"}) {
    auto m = load_model(d + f);
    const ModelConfig& c = m->cfg;
    const bool qwen = std::string(f).rfind("qwen", 0) == 0;
    EXPECT_EQ(c.arch, qwen ? "qwen3moe" : std::string(f).find("gguf") != std::string::npos ? "llama" : "mistral") << f;
    EXPECT_EQ(c.n_expert, 4) << f;
    EXPECT_EQ(c.n_expert_used, 2) << f;
    EXPECT_TRUE(c.expert_norm) << f;
    EXPECT_EQ(c.ffn_dim, qwen ? 96 : 128) << f;
    ASSERT_EQ(m->layers[1].exp_down.size(), 4u) << f;
    EXPECT_EQ(m->layers[1].exp_down[3].ne, (std::vector<int64_t>{c.ffn_dim, 64})) << f;
    EXPECT_EQ(m->layers[1].router.ne, (std::vector<int64_t>{64, 4})) << f;
    EXPECT_FALSE(m->layers[1].w_gate.data) << f;
  }
  for (const char* f : {"qwen2-moe/hf", "qwen2-moe/model.gguf"}) {  // Q/K/V biases, experts and a shared expert
    auto m = load_model(d + f);
    const ModelConfig& c = m->cfg;
    EXPECT_EQ(c.arch, "qwen2moe") << f;
    EXPECT_TRUE(c.qkv_bias && !c.expert_norm) << f;
    EXPECT_EQ(std::vector<int>({c.n_expert, c.n_expert_used, c.ffn_dim, c.shared_expert_ffn_dim}), std::vector<int>({4, 2, 96, 160})) << f;
    EXPECT_EQ(m->layers[1].shexp_down.ne, (std::vector<int64_t>{160, 64})) << f;
    EXPECT_EQ(m->layers[1].shexp_router.ne, (std::vector<int64_t>{64, 1})) << f;
  }
  // Gemma 3: five sliding layers of window 8 then a global one, each kind's RoPE base, the
  // scaled and tied embeddings, and the norms as 1 + w whichever format stored them.
  std::vector<std::unique_ptr<Model>> gemma;
  for (const char* f : {"gemma3-swa/hf", "gemma3-swa/model.gguf"}) {
    auto m = load_model(d + f);
    EXPECT_EQ(m->cfg.arch, "gemma3") << f;
    EXPECT_TRUE(m->cfg.qk_norm && m->cfg.post_norms && m->cfg.tied_output) << f;
    EXPECT_EQ(m->cfg.swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0})) << f;
    EXPECT_EQ(m->cfg.layer_window(0), 8) << f;
    EXPECT_EQ(m->cfg.layer_window(5), 0) << f;
    EXPECT_FLOAT_EQ(m->cfg.rope_theta, 1e6f) << f;
    EXPECT_FLOAT_EQ(m->cfg.rope_theta_swa, 1e4f) << f;
    EXPECT_FLOAT_EQ(m->cfg.embed_scale, 8.0f) << f;
    EXPECT_EQ(m->cfg.rope_layout, RopeLayout::Half) << f;
    gemma.push_back(std::move(m));
  }
  std::vector<float> nh(64), ng(64);
  dequantize_row(gemma[0]->layers[2].ffn_post_norm.type, gemma[0]->layers[2].ffn_post_norm.data, nh.data(), 64);
  dequantize_row(gemma[1]->layers[2].ffn_post_norm.type, gemma[1]->layers[2].ffn_post_norm.data, ng.data(), 64);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(nh[static_cast<size_t>(i)], ng[static_cast<size_t>(i)]) << i;
  EXPECT_GT(nh[0], 1.4f);  // 1 + (1 + 0.2 N(0,1)): the shift was applied once
  // Gemma 2: every other layer sliding (llama.cpp's default pattern: the GGUF holds no pattern),
  // one RoPE base for both kinds, no Q/K norms, and the two soft-caps from either format.
  for (const char* f : {"gemma2-softcap/hf", "gemma2-softcap/model.gguf"}) {
    auto m = load_model(d + f);
    EXPECT_EQ(m->cfg.arch, "gemma2") << f;
    EXPECT_TRUE(!m->cfg.qk_norm && m->cfg.post_norms && m->cfg.tied_output) << f;
    EXPECT_EQ(m->cfg.swa_layers, (std::vector<uint8_t>{1, 0, 1, 0})) << f;
    EXPECT_EQ(m->cfg.layer_window(0), 8) << f;
    EXPECT_FLOAT_EQ(m->cfg.rope_theta_swa, m->cfg.rope_theta) << f;
    EXPECT_FLOAT_EQ(m->cfg.attn_softcap, 4.0f) << f;
    EXPECT_FLOAT_EQ(m->cfg.final_softcap, 2.0f) << f;
    EXPECT_FLOAT_EQ(m->cfg.embed_scale, 8.0f) << f;
  }
}

// Both RoPE layouts give the same logits (the GGUF and HF copies of one model).
TEST(ForwardReferenceFixtures, RopeLayoutsAgree) {
  const std::string d = test::fixtures_dir() + "/models/llama2-mha";
  const Reference ref = load_reference(d);
  auto g = load_model(d + "/model.gguf");
  auto h = load_model(d + "/hf");
  EXPECT_EQ(g->cfg.rope_layout, RopeLayout::Adjacent);
  EXPECT_EQ(h->cfg.rope_layout, RopeLayout::Half);
  std::vector<float> lg, lh;
  Context(*g, test::f32_cache(64, 1, 64)).eval(ref.tokens, &lg, true);
  Context(*h, test::f32_cache(64, 1, 64)).eval(ref.tokens, &lh, true);
  double max_diff = 0;
  for (size_t i = 0; i < lg.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::abs(lg[i] - lh[i])));
  EXPECT_LE(max_diff, 1e-5);
}

}  // namespace
}  // namespace slake

namespace slake {
namespace {

// The final norm's output of every token (what /v1/embeddings pools) against transformers'
// hidden_states[-1] of the same tiny model (tests/fixtures/models/llama-gqa-tied/hidden.json, by
// models/make_embedding_reference.py), from the GGUF file and the HF directory alike; a second
// call gives the same rows (the context is emptied first).
TEST(HiddenStates, MatchTransformers) {
  const std::string d = test::fixtures_dir() + "/models/llama-gqa-tied/";
  std::ifstream in(d + "hidden.json");
  ASSERT_TRUE(in);
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  for (const char* file : {"model.gguf", "hf"}) {
    auto model = load_model(d + file);
    Context ctx(*model, test::f32_cache(64, 2, 64));
    std::vector<float> h, again;
    ctx.hidden_states(tokens, &h);
    ctx.hidden_states(tokens, &again);
    EXPECT_EQ(h, again) << file;
    const int dim = model->cfg.dim;
    ASSERT_EQ(h.size(), tokens.size() * static_cast<size_t>(dim)) << file;
    double max_ref = 0, max_err = 0;
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int i = 0; i < dim; ++i) {
        const double r = ref["hidden"][t][static_cast<size_t>(i)].get<double>();
        max_ref = std::max(max_ref, std::fabs(r));
        max_err = std::max(max_err, std::fabs(r - h[t * static_cast<size_t>(dim) + static_cast<size_t>(i)]));
      }
    EXPECT_LE(max_err / max_ref, 1e-4) << file;
  }
}

}  // namespace
}  // namespace slake
