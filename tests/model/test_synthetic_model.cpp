// Synthetic models (slake-bench --synthetic): the preset shapes are those of the published
// config.json files, the weights are deterministic per seed with the intended spread, and the
// forward pass over them stays finite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/model/synthetic_model.h"
#include "slake/quant/weight_pack.h"
#include "test_util.h"

namespace slake {
namespace {

const ModelConfig& preset(const std::string& name) {
  for (const SyntheticPreset& p : synthetic_presets())
    if (p.name == name) return p.cfg;
  throw std::runtime_error("no preset " + name);
}

TEST(SyntheticModel, PresetsHaveThePublishedShapes) {
  // From each model's config.json: hidden_size, num_hidden_layers, num_attention_heads,
  // num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings.
  struct Want { const char* name; int dim, layers, heads, kv, ffn, vocab, ctx; };
  for (const Want& w : {Want{"llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, 131072}, Want{"llama-2-7b", 4096, 32, 32, 32, 11008, 32000, 4096},
                        Want{"mistral-7b-v0.3", 4096, 32, 32, 8, 14336, 32768, 32768}, Want{"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048}}) {
    const ModelConfig& c = preset(w.name);
    EXPECT_EQ(c.dim, w.dim) << w.name;
    EXPECT_EQ(c.n_layers, w.layers) << w.name;
    EXPECT_EQ(c.n_heads, w.heads) << w.name;
    EXPECT_EQ(c.n_kv_heads, w.kv) << w.name;
    EXPECT_EQ(c.ffn_dim, w.ffn) << w.name;
    EXPECT_EQ(c.n_vocab, w.vocab) << w.name;
    EXPECT_EQ(c.n_ctx_train, w.ctx) << w.name;
  }
  // The Qwen shapes: their config.json's head_dim, tie_word_embeddings, and their layer's extras.
  struct WantQwen { const char* name; const char* arch; int dim, layers, heads, kv, head_dim, ffn, vocab, ctx; bool tied; };
  for (const WantQwen& w : {WantQwen{"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768, true},
                            WantQwen{"qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 128, 8960, 151936, 32768, true},
                            WantQwen{"qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 128, 18944, 152064, 32768, false},
                            WantQwen{"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, true},
                            WantQwen{"qwen3-8b", "qwen3", 4096, 36, 32, 8, 128, 12288, 151936, 40960, false}}) {
    const ModelConfig& c = preset(w.name);
    EXPECT_EQ(c.arch, w.arch) << w.name;
    EXPECT_EQ(std::vector<int>({c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.n_vocab, c.n_ctx_train}),
              std::vector<int>({w.dim, w.layers, w.heads, w.kv, w.head_dim, w.ffn, w.vocab, w.ctx}))
        << w.name;
    EXPECT_EQ(c.tied_output, w.tied) << w.name;
    EXPECT_EQ(c.qkv_bias, std::string(w.arch) == "qwen2") << w.name;
    EXPECT_EQ(c.qk_norm, std::string(w.arch) == "qwen3") << w.name;
  }
  // The Gemma 3 shapes (config.json of google/gemma-3-1b-pt and gemma-3-4b-pt's text_config).
  struct WantGemma { const char* name; int dim, layers, heads, kv, ffn, ctx, window; float factor; };
  for (const WantGemma& w : {WantGemma{"gemma-3-270m", 640, 18, 4, 1, 2048, 32768, 512, 1.0f},
                             WantGemma{"gemma-3-1b", 1152, 26, 4, 1, 6912, 32768, 512, 1.0f},
                             WantGemma{"gemma-3-4b", 2560, 34, 8, 4, 10240, 131072, 1024, 8.0f}}) {
    const ModelConfig& c = preset(w.name);
    EXPECT_EQ(c.arch, "gemma3") << w.name;
    EXPECT_EQ(std::vector<int>({c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.n_vocab, c.n_ctx_train, c.sliding_window}),
              std::vector<int>({w.dim, w.layers, w.heads, w.kv, 256, w.ffn, 262144, w.ctx, w.window}))
        << w.name;
    EXPECT_TRUE(c.qk_norm && c.post_norms && c.tied_output) << w.name;
    EXPECT_EQ(std::count(c.swa_layers.begin(), c.swa_layers.end(), 0), (w.layers + 1) / 6) << w.name;
    EXPECT_EQ(c.rope_freq_factors.empty() ? 1.0f : c.rope_freq_factors[0], w.factor) << w.name;
  }
  // Gemma 2 2B's config.json: alternating 4096-token windows, one RoPE base, soft-capped logits.
  const ModelConfig& g2 = preset("gemma-2-2b");
  EXPECT_EQ(g2.arch, "gemma2");
  EXPECT_EQ(std::vector<int>({g2.dim, g2.n_layers, g2.n_heads, g2.n_kv_heads, g2.head_dim, g2.ffn_dim, g2.n_vocab, g2.n_ctx_train,
                              g2.sliding_window}),
            std::vector<int>({2304, 26, 8, 4, 256, 9216, 256000, 8192, 4096}));
  EXPECT_TRUE(!g2.qk_norm && g2.post_norms && g2.tied_output);
  EXPECT_EQ(std::count(g2.swa_layers.begin(), g2.swa_layers.end(), 0), 13);
  EXPECT_EQ(g2.swa_layers[0], 1);
  EXPECT_FLOAT_EQ(g2.rope_theta_swa, g2.rope_theta);
  EXPECT_EQ(std::vector<float>({g2.attn_softcap, g2.final_softcap}), std::vector<float>({50.0f, 30.0f}));
  // Phi-3-mini-4k-instruct's config.json: 32 MHA heads of 96, rotate-half RoPE, untied.
  const ModelConfig& phi3 = preset("phi-3-mini");
  EXPECT_EQ(phi3.arch, "phi3");
  EXPECT_EQ(std::vector<int>({phi3.dim, phi3.n_layers, phi3.n_heads, phi3.n_kv_heads, phi3.head_dim, phi3.ffn_dim, phi3.n_vocab,
                              phi3.n_ctx_train}),
            std::vector<int>({3072, 32, 32, 32, 96, 8192, 32064, 4096}));
  EXPECT_EQ(phi3.rope_layout, RopeLayout::Half);
  EXPECT_FALSE(phi3.tied_output);
  // The mixtures (Qwen3-30B-A3B's and Mixtral-8x7B-v0.1's config.json).
  struct WantMoe { const char* name; const char* arch; int dim, layers, heads, kv, head_dim, ffn, vocab, experts, used; };
  for (const WantMoe& w : {WantMoe{"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 128, 768, 151936, 128, 8},
                           WantMoe{"mixtral-8x7b", "llama", 4096, 32, 32, 8, 128, 14336, 32000, 8, 2}}) {
    const ModelConfig& c = preset(w.name);
    EXPECT_EQ(c.arch, w.arch) << w.name;
    EXPECT_EQ(std::vector<int>({c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.n_vocab, c.n_expert, c.n_expert_used}),
              std::vector<int>({w.dim, w.layers, w.heads, w.kv, w.head_dim, w.ffn, w.vocab, w.experts, w.used}))
        << w.name;
    EXPECT_TRUE(c.expert_norm) << w.name;
  }
  // gemma-3-270m against the real file's own hyperparameters, when it has been fetched.
  const std::string real = test::real_model("gemma-3-270m-q4_k_m.gguf");
  if (!real.empty()) {
    const auto m = load_model(real);
    const ModelConfig &c = preset("gemma-3-270m"), &f = m->cfg;
    EXPECT_EQ(std::vector<int>({c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.n_vocab, c.n_ctx_train, c.sliding_window}),
              std::vector<int>({f.dim, f.n_layers, f.n_heads, f.n_kv_heads, f.head_dim, f.ffn_dim, f.n_vocab, f.n_ctx_train, f.sliding_window}));
    EXPECT_EQ(c.swa_layers, f.swa_layers);
    EXPECT_EQ(std::vector<float>({c.rope_theta, c.rope_theta_swa, c.rms_eps, c.embed_scale}),
              std::vector<float>({f.rope_theta, f.rope_theta_swa, f.rms_eps, f.embed_scale}));
  }
  // Their KV policy defaults are algorithm.md §2.4's rows for those models.
  KvPolicyParams p;
  p.budget = 128;
  EXPECT_EQ(*resolve_kv_defaults(p, preset("llama-3.1-8b")).tau2, 0.6);
  EXPECT_EQ(*resolve_kv_defaults(p, preset("llama-2-7b")).tau1, 0.9);
  EXPECT_EQ(*resolve_kv_defaults(p, preset("mistral-7b-v0.3")).alpha, 0.6);
}

TEST(SyntheticModel, DeterministicPerSeedWithTheIntendedSpread) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(t));
    const auto a = make_synthetic_model("tiny", t, 1), b = make_synthetic_model("tiny", t, 1), c = make_synthetic_model("tiny", t, 2);
    const TensorView &wa = a->layers[1].w_up, &wb = b->layers[1].w_up, &wc = c->layers[1].w_up;
    EXPECT_EQ(wa.type, t);
    EXPECT_EQ(std::memcmp(wa.data, wb.data, wa.nbytes), 0);
    EXPECT_NE(std::memcmp(wa.data, wc.data, wa.nbytes), 0);
    // Entries of a matrix scale as 1/sqrt(fan-in): standard deviation 1/16 for dim 256.
    std::vector<float> row(static_cast<size_t>(wa.row_len()));
    std::vector<uint8_t> raw;
    double ss = 0;
    for (int64_t r = 0; r < 64; ++r) {
      dequantize_row(wa.type, row_in_file_layout(wa, r, raw), row.data(), wa.row_len());
      for (float x : row) ss += static_cast<double>(x) * x;
    }
    EXPECT_NEAR(std::sqrt(ss / (64.0 * wa.row_len())), 1.0 / 16, 0.1 / 16);
    EXPECT_EQ(a->layers[0].attn_norm.type, DType::F32);
  }
  EXPECT_THROW(make_synthetic_model("gpt-5", DType::Q4_0, 1), Error);
  EXPECT_THROW(make_synthetic_model("tiny", DType::Q6_K, 1), Error);
}

// The Qwen presets run through their own layer definitions (biases, Q/K norms, tied output).
TEST(SyntheticModel, QwenShapesRunAndStayFinite) {
  for (const char* name : {"qwen2.5-0.5b", "qwen3-0.6b"}) {
    SCOPED_TRACE(name);
    const auto m = make_synthetic_model(name, DType::Q4_0, 3);
    EXPECT_EQ(m->weights().size(), m->cfg.n_layers * (m->cfg.qkv_bias ? 12u : 11u) + 2u);  // tied: no output matrix
    Context ctx(*m, {64, 2});
    std::vector<int32_t> prompt(16);
    for (int i = 0; i < 16; ++i) prompt[static_cast<size_t>(i)] = (i * 7919) % m->cfg.n_vocab;
    std::vector<float> logits;
    ctx.eval(prompt, &logits);
    ASSERT_EQ(logits.size(), static_cast<size_t>(m->cfg.n_vocab));
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(SyntheticModel, ForwardPassStaysFinite) {
  const auto m = make_synthetic_model("tiny", DType::Q4_0, 7);
  Context ctx(*m, {256, 2});
  std::vector<int32_t> prompt(100);
  for (int i = 0; i < 100; ++i) prompt[static_cast<size_t>(i)] = (i * 37) % m->cfg.n_vocab;
  std::vector<float> logits;
  ctx.eval(prompt, &logits);
  float lo = logits[0], hi = logits[0];
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GT(hi - lo, 0.1f);  // not a constant: the weights carry signal through the layers
}

}  // namespace
}  // namespace slake
