// Model loading refuses inconsistent files with a one-line message naming the file and the problem.
#include <gmock/gmock.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/model/model.h"
#include "slake/format/writers.h"
#include "test_util.h"

namespace slake {
namespace {

using ::testing::HasSubstr;

struct TinySpec {
  int dim = 8, n_heads = 2, n_kv = 1, ffn = 16, n_layers = 1, vocab = 8;
  // qwen2 adds the Q/K/V biases, qwen3 the per-head Q/K norms, gemma3 both norms and post-norms,
  // gemma2 the post-norms, phi3 fuses Q/K/V and gate/up
  std::string arch = "llama";
  int n_expert = 0, n_expert_used = 2;  // with experts: the expert keys and stacked expert tensors
  bool expert_keys = true;               // false: the expert tensors alone
};

// A well-formed tiny GGUF model; `edit` may change the writer before tensors are added.
GgufWriter tiny_gguf(const TinySpec& s, const std::function<void(GgufWriter&)>& edit = {},
                     const std::string& skip_tensor = "", const std::string& reshape_tensor = "") {
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.set_str("general.architecture", s.arch);
  w.set_u32(a + "context_length", 64);
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layers));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.n_expert > 0 && s.expert_keys) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
  }
  if (edit) edit(w);
  const int64_t d = s.dim, hd = s.dim / s.n_heads, kv = hd * s.n_kv, f = s.ffn, v = s.vocab;
  auto add = [&](const std::string& name, std::vector<int64_t> ne) {
    if (name == skip_tensor) return;
    if (name == reshape_tensor) ne[0] += 1;
    int64_t n = 1;
    for (int64_t x : ne) n *= x;
    std::vector<float> data(static_cast<size_t>(n), 0.01f);
    w.add_f32_tensor(name, ne, data.data());
  };
  add("token_embd.weight", {d, v});
  add("output_norm.weight", {d});
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {d});
    if (s.arch == "phi3") {
      add(b + "attn_qkv.weight", {d, d + 2 * kv});
    } else {
      add(b + "attn_q.weight", {d, d});
      add(b + "attn_k.weight", {d, kv});
      add(b + "attn_v.weight", {d, kv});
    }
    add(b + "attn_output.weight", {d, d});
    add(b + "ffn_norm.weight", {d});
    if (s.n_expert > 0) {
      const int64_t e = s.n_expert;
      add(b + "ffn_gate_inp.weight", {d, e});
      add(b + "ffn_gate_exps.weight", {d, f, e});
      add(b + "ffn_up_exps.weight", {d, f, e});
      add(b + "ffn_down_exps.weight", {f, d, e});
      continue;
    }
    if (s.arch != "phi3") add(b + "ffn_gate.weight", {d, f});
    add(b + "ffn_up.weight", {d, s.arch == "phi3" ? 2 * f : f});
    add(b + "ffn_down.weight", {f, d});
    if (s.arch == "qwen2") {
      add(b + "attn_q.bias", {d});
      add(b + "attn_k.bias", {kv});
      add(b + "attn_v.bias", {kv});
    }
    if (s.arch == "qwen3" || s.arch == "gemma3") {
      add(b + "attn_q_norm.weight", {hd});
      add(b + "attn_k_norm.weight", {hd});
    }
    if (s.arch == "gemma2" || s.arch == "gemma3") {
      add(b + "post_attention_norm.weight", {d});
      add(b + "post_ffw_norm.weight", {d});
    }
  }
  return w;
}

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error spans several lines: " << msg;
    return msg;
  }
  return "";
}

std::string gguf_error(const GgufWriter& w) {
  test::TempDir dir;
  write_file(dir.file("m.gguf"), w.to_bytes());
  const std::string err = load_error(dir.file("m.gguf"));
  EXPECT_THAT(err, HasSubstr(dir.file("m.gguf"))) << "the message should name the file";
  return err;
}

TEST(ModelErrors, TinyGgufLoads) {
  test::TempDir dir;
  write_file(dir.file("m.gguf"), tiny_gguf({}).to_bytes());
  auto m = load_model(dir.file("m.gguf"));
  EXPECT_EQ(m->cfg.head_dim, 4);
  EXPECT_TRUE(m->cfg.tied_output);
  EXPECT_EQ(m->cfg.rope_layout, RopeLayout::Adjacent);
}

// The families' own tensors: present, the model loads as its architecture; missing or of the wrong
// shape, the error names the tensor.
TEST(ModelErrors, FamilyTensorsAreChecked) {
  TinySpec q2, q3;
  q2.arch = "qwen2";
  q3.arch = "qwen3";
  for (const TinySpec& s : {q2, q3}) {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(s).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->cfg.arch, s.arch);
    EXPECT_EQ(m->cfg.qkv_bias, s.arch == "qwen2");
    EXPECT_EQ(m->cfg.qk_norm, s.arch == "qwen3");
    EXPECT_EQ(m->cfg.rope_layout, RopeLayout::Half);
  }
  EXPECT_THAT(gguf_error(tiny_gguf(q2, {}, "blk.0.attn_v.bias")), HasSubstr("missing tensor blk.0.attn_v.bias"));
  EXPECT_THAT(gguf_error(tiny_gguf(q3, {}, "blk.0.attn_q_norm.weight")), HasSubstr("missing tensor blk.0.attn_q_norm.weight"));
  EXPECT_THAT(gguf_error(tiny_gguf(q3, {}, "", "blk.0.attn_k_norm.weight")),
              HasSubstr("tensor blk.0.attn_k_norm.weight has shape [5], expected [4]"));
}

// Phi-3: the fused tensors' shapes and LongRoPE's pair of factor tensors are checked.
TEST(ModelErrors, Phi3FusedTensorsAndLongRope) {
  TinySpec p;
  p.arch = "phi3";
  {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(p).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->layers[0].wv.ne, (std::vector<int64_t>{8, 4}));
    EXPECT_EQ(m->layers[0].w_up.ne, (std::vector<int64_t>{8, 16}));
  }
  EXPECT_THAT(gguf_error(tiny_gguf(p, {}, "blk.0.ffn_up.weight")), HasSubstr("missing tensor blk.0.ffn_up.weight"));
  EXPECT_THAT(gguf_error(tiny_gguf(p, {}, "blk.0.attn_qkv.weight")), HasSubstr("missing tensor blk.0.attn_q.weight"));
  EXPECT_THAT(gguf_error(tiny_gguf(p, {}, "", "blk.0.attn_qkv.weight")),
              HasSubstr("tensor blk.0.attn_qkv.weight has shape [9, 16], expected [8, 16]"));
  const std::vector<float> two{1.0f, 2.0f};
  EXPECT_THAT(gguf_error(tiny_gguf(p, [&](GgufWriter& w) { w.add_f32_tensor("rope_factors_long.weight", {2}, two.data()); })),
              HasSubstr("rope_factors_long.weight without rope_factors_short.weight"));
  EXPECT_THAT(gguf_error(tiny_gguf(p, [&](GgufWriter& w) {
                w.add_f32_tensor("rope_factors_long.weight", {2}, two.data());
                w.add_f32_tensor("rope_factors_short.weight", {2}, two.data());
                w.set_f32("phi3.rope.scaling.attn_factor", -1.0f);
              })),
              HasSubstr("RoPE attention factor must be positive"));
}

// Experts: the keys and the stacked tensors must agree.
TEST(ModelErrors, ExpertKeysAndTensorsAgree) {
  TinySpec moe;
  moe.n_expert = 4;
  {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(moe).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->cfg.n_expert, 4);
    EXPECT_EQ(m->layers[0].exp_up[3].ne, (std::vector<int64_t>{8, 16}));
  }
  // Expert tensors without an expert count, and a count without the tensors.
  TinySpec keyless = moe;
  keyless.expert_keys = false;
  EXPECT_THAT(gguf_error(tiny_gguf(keyless)),
              HasSubstr("the file has expert tensors (blk.0.ffn_gate_inp.weight) but no llama.expert_count"));
  TinySpec dense;
  EXPECT_THAT(gguf_error(tiny_gguf(dense, [](GgufWriter& w) {
                w.set_u32("llama.expert_count", 4);
                w.set_u32("llama.expert_used_count", 2);
              })),
              HasSubstr("missing tensor blk.0.ffn_gate_inp.weight"));
  moe.n_expert_used = 5;
  EXPECT_THAT(gguf_error(tiny_gguf(moe)), HasSubstr("experts used per token (5) must be between 1 and the expert count (4)"));
  moe.n_expert_used = 2;
  EXPECT_THAT(gguf_error(tiny_gguf(moe, {}, "", "blk.0.ffn_down_exps.weight")),
              HasSubstr("tensor blk.0.ffn_down_exps.weight has shape [17, 8, 4], expected [16, 8, 4]"));
}

// Gemma 3's layer pattern: the default period of 6, a period or per-layer flags from the file, and
// what contradicts the rest of the file.
TEST(ModelErrors, Gemma3LayerPattern) {
  TinySpec g;
  g.arch = "gemma3";
  g.n_layers = 7;
  auto window = [](uint32_t n) { return [n](GgufWriter& w) { w.set_u32("gemma3.attention.sliding_window", n); }; };
  {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(g, window(16)).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->cfg.swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1}));
    EXPECT_TRUE(m->cfg.post_norms && m->cfg.qk_norm);
    EXPECT_FLOAT_EQ(m->cfg.embed_scale, std::sqrt(8.0f));
    EXPECT_FLOAT_EQ(m->cfg.rope_theta_swa, 10000.0f);
  }
  {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(g, [](GgufWriter& w) {
                                     w.set_u32("gemma3.attention.sliding_window", 16);
                                     w.set_i32_array("gemma3.attention.sliding_window_pattern", {0, 1, 0, 1, 0, 1, 0});
                                     w.set_f32("gemma3.rope.freq_base_swa", 5000.0f);
                                   }).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->cfg.swa_layers, (std::vector<uint8_t>{0, 1, 0, 1, 0, 1, 0}));
    EXPECT_FLOAT_EQ(m->cfg.rope_theta_swa, 5000.0f);
  }
  {  // no sliding window: every layer global
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(g).to_bytes());
    EXPECT_TRUE(load_model(dir.file("m.gguf"))->cfg.swa_layers.empty());
  }
  EXPECT_THAT(gguf_error(tiny_gguf(g, window(65))), HasSubstr("sliding window (65) is larger than the training context (64)"));
  EXPECT_THAT(gguf_error(tiny_gguf(g, [](GgufWriter& w) {
                w.set_u32("gemma3.attention.sliding_window", 16);
                w.set_i32_array("gemma3.attention.sliding_window_pattern", {1, 0});
              })),
              HasSubstr("has 2 entries for 7 layers"));
  EXPECT_THAT(gguf_error(tiny_gguf(g, [](GgufWriter& w) { w.set_f32("gemma3.final_logit_softcapping", -30.0f); })),
              HasSubstr("final logit soft-cap must be 0 (none) or positive"));
  EXPECT_THAT(gguf_error(tiny_gguf(g, {}, "blk.3.post_ffw_norm.weight")), HasSubstr("missing tensor blk.3.post_ffw_norm.weight"));
}

// Gemma 2's keys and llama.cpp's defaults for those its converter may leave out: soft-caps 50 and
// 30, every other layer local, the local layers at the global RoPE base, a window of 4096 (here the
// 64-token training context); no RoPE scaling and no 27B query scale.
TEST(ModelErrors, Gemma2KeysAndDefaults) {
  TinySpec g;
  g.arch = "gemma2";
  g.n_layers = 4;
  {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(g, [](GgufWriter& w) {
                                     w.set_u32("gemma2.attention.sliding_window", 16);
                                     w.set_f32("gemma2.rope.freq_base", 1e6f);
                                   }).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->cfg.swa_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
    EXPECT_EQ(m->cfg.sliding_window, 16);
    EXPECT_TRUE(m->cfg.post_norms && !m->cfg.qk_norm);
    EXPECT_FLOAT_EQ(m->cfg.rope_theta_swa, 1e6f);
    EXPECT_EQ(std::vector<float>({m->cfg.attn_softcap, m->cfg.final_softcap}), std::vector<float>({50.0f, 30.0f}));
  }
  {
    test::TempDir dir;
    write_file(dir.file("m.gguf"), tiny_gguf(g, [](GgufWriter& w) {
                                     w.set_f32("gemma2.attn_logit_softcapping", 7.0f);
                                     w.set_f32("gemma2.final_logit_softcapping", 3.0f);
                                   }).to_bytes());
    auto m = load_model(dir.file("m.gguf"));
    EXPECT_EQ(m->cfg.sliding_window, 64);
    EXPECT_EQ(m->cfg.swa_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
    EXPECT_EQ(std::vector<float>({m->cfg.attn_softcap, m->cfg.final_softcap}), std::vector<float>({7.0f, 3.0f}));
  }
  EXPECT_THAT(gguf_error(tiny_gguf(g, [](GgufWriter& w) {
                w.set_str("gemma2.rope.scaling.type", "linear");
                w.set_f32("gemma2.rope.scaling.factor", 2.0f);
              })),
              HasSubstr("RoPE scaling of Gemma 2 is not supported"));
  EXPECT_THAT(gguf_error(tiny_gguf(g, [](GgufWriter& w) { w.set_f32("gemma2.attn_logit_softcapping", -1.0f); })),
              HasSubstr("attention logit soft-cap must be 0 (none) or positive"));
  TinySpec big = g;
  big.n_layers = 46;
  EXPECT_THAT(gguf_error(tiny_gguf(big, [](GgufWriter& w) { w.set_u32("gemma2.attention.key_length", 8); w.set_u32("gemma2.attention.value_length", 8); })),
              HasSubstr("27B model's query scale"));
}

TEST(ModelErrors, GgufInconsistencies) {
  EXPECT_THAT(gguf_error(tiny_gguf({}, {}, "blk.0.ffn_up.weight")), HasSubstr("missing tensor blk.0.ffn_up.weight"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, {}, "", "blk.0.attn_k.weight")),
              HasSubstr("tensor blk.0.attn_k.weight has shape [9, 4], expected [8, 4]"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, {}, "token_embd.weight")), HasSubstr("missing tensor token_embd.weight"));
  TinySpec odd;
  odd.n_kv = 3;
  EXPECT_THAT(gguf_error(tiny_gguf(odd)), HasSubstr("not a multiple of the KV head count"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, [](GgufWriter& w) { w.set_str("general.architecture", "gpt2"); })),
              HasSubstr("duplicate metadata key general.architecture"));
  GgufWriter no_arch;
  EXPECT_THAT(gguf_error(no_arch), HasSubstr("missing metadata key general.architecture"));
  GgufWriter other;
  other.set_str("general.architecture", "falcon");
  EXPECT_THAT(gguf_error(other), HasSubstr("architecture 'falcon' is not supported"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, [](GgufWriter& w) { w.set_str("llama.rope.scaling.type", "yarn"); })),
              HasSubstr("RoPE scaling type 'yarn' is not supported"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, [](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 2); })),
              HasSubstr("partial RoPE"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, [](GgufWriter& w) { w.set_u32("llama.vocab_size", 9); })),
              HasSubstr("vocab_size disagrees"));
  EXPECT_THAT(gguf_error(tiny_gguf({}, [](GgufWriter& w) { w.set_str("llama.attention.key_length", "four"); })),
              HasSubstr("expected an integer"));
}

TEST(ModelErrors, GgufVocabularyChecks) {
  auto with_vocab = [](size_t n_tokens, size_t n_scores, uint32_t bos) {
    return tiny_gguf({}, [=](GgufWriter& w) {
      w.set_str_array("tokenizer.ggml.tokens", std::vector<std::string>(n_tokens, "x"));
      w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(n_scores, 0.0f));
      w.set_u32("tokenizer.ggml.bos_token_id", bos);
    });
  };
  EXPECT_THAT(gguf_error(with_vocab(8, 7, 1)), HasSubstr("tokenizer.ggml.scores has 7 entries for 8 tokens"));
  EXPECT_THAT(gguf_error(with_vocab(8, 8, 8)), HasSubstr("tokenizer.ggml.bos_token_id = 8 is outside the vocabulary"));
  EXPECT_THAT(gguf_error(with_vocab(9, 9, 1)), HasSubstr("the vocabulary has 9 tokens but the model only 8"));
}

// A copy of the llama2-mha fixture's HF directory, with config.json replaced by `cfg`.
std::string hf_error(const test::TempDir& dir, const std::function<void(nlohmann::json&)>& edit_cfg,
                     const std::string& fixture = "llama2-mha") {
  const std::string src = test::fixtures_dir() + "/models/" + fixture + "/hf";
  std::system(("cp " + src + "/model.safetensors " + dir.path() + "/").c_str());
  nlohmann::json cfg = nlohmann::json::parse(read_text_file(src + "/config.json"));
  edit_cfg(cfg);
  write_file(dir.file("config.json"), cfg.dump());
  return load_error(dir.path());
}

TEST(ModelErrors, HfInconsistencies) {
  test::TempDir dir;
  EXPECT_EQ(hf_error(dir, [](nlohmann::json&) {}), "");
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["model_type"] = "gpt_neox"; }), HasSubstr("model_type 'gpt_neox' is not supported"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c.erase("hidden_size"); }), HasSubstr("config.json: missing hidden_size"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["hidden_size"] = "64"; }), HasSubstr("hidden_size is not an integer"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["intermediate_size"] = 100; }),
              HasSubstr("tensor model.layers.0.mlp.gate_proj.weight has shape [64, 128], expected [64, 100]"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["num_hidden_layers"] = 3; }), HasSubstr("missing tensor model.layers.2."));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["num_key_value_heads"] = 3; }), HasSubstr("not a multiple"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["attention_bias"] = true; }), HasSubstr("biases are not supported"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}}; }),
              HasSubstr("RoPE scaling type 'yarn'"));
  EXPECT_THAT(hf_error(dir, [](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 1e4}}; }),
              HasSubstr("rope scaling 'llama3' needs"));

  // Gemma 3's settings the engine does not implement are refused, not ignored.
  auto gemma = [&](const std::function<void(nlohmann::json&)>& edit) { return hf_error(dir, edit, "gemma3-swa"); };
  EXPECT_EQ(gemma([](nlohmann::json&) {}), "");
  EXPECT_THAT(gemma([](nlohmann::json& c) { c["hidden_activation"] = "gelu"; }), HasSubstr("hidden_activation 'gelu' is not supported"));
  EXPECT_THAT(gemma([](nlohmann::json& c) { c["query_pre_attn_scalar"] = 168; }), HasSubstr("query_pre_attn_scalar"));
  EXPECT_THAT(gemma([](nlohmann::json& c) { c["final_logit_softcapping"] = -30.0; }), HasSubstr("final logit soft-cap must be 0"));
  EXPECT_THAT(gemma([](nlohmann::json& c) { c["attn_logit_softcapping"] = "50"; }), HasSubstr("attn_logit_softcapping is not a number"));
  // Gemma 2 likewise: its 27B query scale (also transformers' default 256 against head_dim 32),
  // a negative cap, RoPE scaling.
  auto gemma2 = [&](const std::function<void(nlohmann::json&)>& edit) { return hf_error(dir, edit, "gemma2-softcap"); };
  EXPECT_EQ(gemma2([](nlohmann::json&) {}), "");
  EXPECT_THAT(gemma2([](nlohmann::json& c) { c["query_pre_attn_scalar"] = 144; }), HasSubstr("query_pre_attn_scalar"));
  EXPECT_THAT(gemma2([](nlohmann::json& c) { c.erase("query_pre_attn_scalar"); }), HasSubstr("query_pre_attn_scalar"));
  EXPECT_THAT(gemma2([](nlohmann::json& c) { c["attn_logit_softcapping"] = -1.0; }), HasSubstr("attention logit soft-cap must be 0"));
  EXPECT_THAT(gemma2([](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}}; }),
              HasSubstr("RoPE scaling of Gemma 2 is not supported"));
  // Absent keys take transformers' defaults (caps 50 and 30, window 4096), null ones none; the
  // local layers rotate at the global base.
  {
    test::TempDir d2;
    EXPECT_EQ(hf_error(d2, [](nlohmann::json& c) {
                c.erase("attn_logit_softcapping");
                c.erase("final_logit_softcapping");
                c.erase("sliding_window");
                c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
              }, "gemma2-softcap"), "");
    auto m = load_model(d2.path());
    EXPECT_EQ(std::vector<float>({m->cfg.attn_softcap, m->cfg.final_softcap}), std::vector<float>({50.0f, 30.0f}));
    EXPECT_EQ(m->cfg.sliding_window, 4096);
    EXPECT_FLOAT_EQ(m->cfg.rope_theta_swa, 5e5f);
    EXPECT_EQ(hf_error(d2, [](nlohmann::json& c) { c["attn_logit_softcapping"] = nullptr; c["final_logit_softcapping"] = nullptr; },
                       "gemma2-softcap"), "");
    m = load_model(d2.path());
    EXPECT_EQ(std::vector<float>({m->cfg.attn_softcap, m->cfg.final_softcap}), std::vector<float>({0.0f, 0.0f}));
  }
  EXPECT_THAT(gemma([](nlohmann::json& c) { c["layer_types"] = {"sliding_attention"}; }), HasSubstr("layer_types must name every layer"));
  EXPECT_THAT(gemma([](nlohmann::json& c) { c["layer_types"][0] = "chunked_attention"; }), HasSubstr("unknown layer type"));

  // Phi-3: LongRoPE's factors must cover every frequency; partial RoPE (Phi-4-mini) is refused.
  auto phi3 = [&](const std::function<void(nlohmann::json&)>& edit) { return hf_error(dir, edit, "phi3-longrope"); };
  EXPECT_EQ(phi3([](nlohmann::json&) {}), "");
  EXPECT_THAT(phi3([](nlohmann::json& c) { c["rope_parameters"]["long_factor"] = {1.0, 2.0}; }), HasSubstr("needs long_factor with 8 numbers"));
  EXPECT_THAT(phi3([](nlohmann::json& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.75; }), HasSubstr("partial RoPE"));

  write_file(dir.file("config.json"), std::string("{\"model_type\": \"llama\", "));
  EXPECT_THAT(load_error(dir.path()), HasSubstr("config.json: malformed JSON"));
  std::system(("rm " + dir.file("config.json")).c_str());
  EXPECT_THAT(load_error(dir.path()), HasSubstr("no config.json"));
  EXPECT_THAT(load_error("/nonexistent/dir"), HasSubstr("/nonexistent/dir: no such file or directory"));
}

}  // namespace
}  // namespace slake

namespace slake {
namespace {

TEST(ContextErrors, RefusesImpossibleRequests) {
  auto m = load_model(test::fixtures_dir() + "/models/llama2-mha/model.gguf");
  try {
    Context ctx(*m, {1 << 30, 1, 16});
    FAIL() << "a terabyte-sized context was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("MiB of KV cache, more than this machine's"));
  }
  EXPECT_THROW(Context(*m, {-1, 1, 16}), Error);
  EXPECT_THROW(Context(*m, {16, 1, 0}), Error);
  EXPECT_THROW(Context(*m, {16, 0, 16}).eval({}, nullptr), Error);
  Context ctx(*m, {4, 1, 16});
  EXPECT_THAT([&] { ctx.eval({1, 2, 300}, nullptr); }, ::testing::ThrowsMessage<Error>(HasSubstr("token id 300 is outside")));
  ctx.eval({1, 2, 3}, nullptr);
  EXPECT_THAT([&] { ctx.eval({1, 2}, nullptr); }, ::testing::ThrowsMessage<Error>(HasSubstr("context full: 3 + 2 tokens")));
  EXPECT_EQ(ctx.n_past(), 3);
  ctx.eval({4}, nullptr);
  ctx.reset();
  EXPECT_EQ(ctx.kv_cache().tokens_held(), 0);
}

}  // namespace
}  // namespace slake
