// Model loading from a Hugging Face checkpoint directory: config.json, safetensors (single file or
// sharded), and, when present, tokenizer.json for the vocabulary.
#include <sys/stat.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "model_internal.h"
#include "slake/error.h"
#include "slake/format/safetensors.h"
#include "slake/quant/dtype.h"
#include "slake/tokenizer/vocab_readers.h"

namespace slake::detail {

namespace {

using nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& file) : j_(j), file_(file) {}
  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }
  int get_int(const std::string& k) const {
    if (!has(k)) fail(file_ + ": missing " + k);
    return to_int(j_[k], k);
  }
  int get_int(const std::string& k, int fallback) const { return has(k) ? get_int(k) : fallback; }
  double get_num(const json& v, const std::string& k) const {
    if (!v.is_number()) fail(file_ + ": " + k + " is not a number");
    return v.get<double>();
  }
  double get_num(const std::string& k, double fallback) const { return has(k) ? get_num(j_[k], k) : fallback; }
  int to_int(const json& v, const std::string& k) const {
    if (!v.is_number_integer()) fail(file_ + ": " + k + " is not an integer");
    const int64_t x = v.get<int64_t>();
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
      fail(file_ + ": " + k + " = " + std::to_string(x) + " is out of range");
    return static_cast<int>(x);
  }
  const json& raw() const { return j_; }

 private:
  const json& j_;
  const std::string& file_;
};

// RoPE parameters: transformers 4.x writes rope_theta + rope_scaling, 5.x writes rope_parameters.
void read_rope(const ConfigReader& r, ModelConfig& c, const std::string& file) {
  const json& j = r.raw();
  json params = json::object();
  if (r.has("rope_parameters")) params = j["rope_parameters"];
  else if (r.has("rope_scaling")) params = j["rope_scaling"];
  if (!params.is_object()) fail(file + ": rope parameters are not an object");
  c.rope_theta = static_cast<float>(r.get_num("rope_theta", 10000.0));
  if (params.contains("rope_theta")) c.rope_theta = static_cast<float>(r.get_num(params["rope_theta"], "rope_theta"));
  const double partial = params.contains("partial_rotary_factor") ? r.get_num(params["partial_rotary_factor"], "partial_rotary_factor")
                                                                  : r.get_num("partial_rotary_factor", 1.0);
  if (partial != 1.0) fail(file + ": partial RoPE (partial_rotary_factor " + std::to_string(partial) + ") is not supported");
  std::string type = "default";
  if (params.contains("rope_type") && params["rope_type"].is_string()) type = params["rope_type"].get<std::string>();
  else if (params.contains("type") && params["type"].is_string()) type = params["type"].get<std::string>();
  auto num = [&](const char* k) {
    if (!params.contains(k)) fail(file + ": rope scaling '" + type + "' needs " + k);
    return r.get_num(params[k], k);
  };
  if (type == "default") return;
  if (type == "longrope" || type == "su") {  // Phi-3 128K, as transformers' _compute_longrope_parameters
    auto factors = [&](const char* k) {
      if (!params.contains(k) || !params[k].is_array() || params[k].size() != static_cast<size_t>(c.head_dim / 2))
        fail(file + ": rope scaling '" + type + "' needs " + k + " with " + std::to_string(c.head_dim / 2) + " numbers");
      std::vector<float> v;
      for (const json& x : params[k]) v.push_back(static_cast<float>(r.get_num(x, k)));
      return v;
    };
    c.rope_freq_factors = factors("short_factor");
    c.rope_freq_factors_long = factors("long_factor");
    c.n_ctx_orig = params.contains("original_max_position_embeddings")
                       ? r.to_int(params["original_max_position_embeddings"], "original_max_position_embeddings")
                       : r.get_int("original_max_position_embeddings");
    if (c.n_ctx_orig <= 0) fail(file + ": original_max_position_embeddings must be positive");
    const double factor = params.contains("factor") ? r.get_num(params["factor"], "factor")
                                                    : static_cast<double>(c.n_ctx_train) / c.n_ctx_orig;
    c.rope_attn_factor = params.contains("attention_factor")
                             ? static_cast<float>(r.get_num(params["attention_factor"], "attention_factor"))
                             : factor <= 1.0 ? 1.0f : static_cast<float>(std::sqrt(1.0 + std::log(factor) / std::log(c.n_ctx_orig)));
    return;
  }
  if (type == "linear") {
    c.rope_freq_factors.assign(static_cast<size_t>(c.head_dim / 2), static_cast<float>(num("factor")));
  } else if (type == "llama3") {
    c.rope_freq_factors = llama3_rope_factors(c.head_dim, c.rope_theta, static_cast<float>(num("factor")),
                                              static_cast<float>(num("low_freq_factor")),
                                              static_cast<float>(num("high_freq_factor")),
                                              static_cast<float>(num("original_max_position_embeddings")));
  } else {
    fail(file + ": RoPE scaling type '" + type + "' is not supported");
  }
}

// Gemma 2 and 3 (model_type gemma2, gemma3_text): GELU-tanh, post-norms, scaled embeddings,
// soft-capped logits where the config sets them (null: none; absent: transformers' defaults,
// Gemma 2's 50 and 30 and window 4096, none for Gemma 3), and the local/global layer pattern
// (layer_types, or transformers 4's sliding_window_pattern: 2 for Gemma 2, 6 for Gemma 3) with
// each kind's RoPE base (Gemma 3: rope_parameters per layer type, or rope_theta and
// rope_local_base_freq; Gemma 2's local layers share the global base).
void gemma_config(const ConfigReader& r, ModelConfig& c, const std::string& file) {
  const json& j = r.raw();
  const bool gemma2 = c.arch == "gemma2";
  const std::string act = j.value("hidden_activation", j.value("hidden_act", std::string("gelu_pytorch_tanh")));
  if (act != "gelu_pytorch_tanh") fail(file + ": hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh is)");
  // A key that is absent takes transformers' default; one that is null means none.
  auto absent = [&](const char* k) { return !j.contains(k); };
  c.attn_softcap = static_cast<float>(r.get_num("attn_logit_softcapping", gemma2 && absent("attn_logit_softcapping") ? 50.0 : 0.0));
  c.final_softcap = static_cast<float>(r.get_num("final_logit_softcapping", gemma2 && absent("final_logit_softcapping") ? 30.0 : 0.0));
  if (r.get_int("query_pre_attn_scalar", gemma2 && absent("query_pre_attn_scalar") ? 256 : c.head_dim) != c.head_dim)
    fail(file + ": query_pre_attn_scalar other than head_dim is not supported");
  c.qk_norm = !gemma2;
  c.post_norms = true;
  c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  c.sliding_window = r.get_int("sliding_window", gemma2 && absent("sliding_window") ? 4096 : 0);
  if (r.has("layer_types")) {
    const json& t = j["layer_types"];
    if (!t.is_array() || t.size() != static_cast<size_t>(c.n_layers)) fail(file + ": layer_types must name every layer");
    for (const json& e : t) {
      if (e != "sliding_attention" && e != "full_attention") fail(file + ": unknown layer type " + e.dump());
      c.swa_layers.push_back(e == "sliding_attention");
    }
  } else {
    c.swa_layers = local_layer_pattern(c.n_layers, r.get_int("sliding_window_pattern", gemma2 ? 2 : 6));
  }
  if (c.sliding_window <= 0) c.swa_layers.clear();
  c.rope_theta_swa = static_cast<float>(r.get_num("rope_local_base_freq", 10000.0));
  if (r.has("rope_parameters") && j["rope_parameters"].contains("sliding_attention")) {
    const json& s = j["rope_parameters"]["sliding_attention"];
    if (s.value("rope_type", std::string("default")) != "default") fail(file + ": RoPE scaling of sliding layers is not supported");
    if (s.contains("rope_theta")) c.rope_theta_swa = static_cast<float>(r.get_num(s["rope_theta"], "rope_theta"));
  }
}

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::unique_ptr<Model> load_hf_dir(const std::string& dir) {
  const std::string cfg_path = dir + "/config.json";
  if (!file_exists(cfg_path)) fail(dir + ": not a model directory (no config.json)");
  const json j = parse_json_file(cfg_path);
  if (!j.is_object()) fail(cfg_path + ": not a JSON object");
  ConfigReader r(j, cfg_path);
  auto m = std::make_unique<Model>();
  m->format = "hf";
  ModelConfig& c = m->cfg;
  c.arch = j.value("model_type", std::string());
  const std::string model_type = c.arch;
  if (c.arch == "gemma3_text") c.arch = "gemma3";
  if (c.arch == "qwen3_moe") c.arch = "qwen3moe";
  if (c.arch == "qwen2_moe") c.arch = "qwen2moe";
  if (c.arch == "mixtral") c.arch = "mistral";  // Mistral's layer with experts (llama.cpp: llama)
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "qwen2" && c.arch != "qwen2moe" && c.arch != "qwen3" &&
      c.arch != "qwen3moe" && c.arch != "gemma2" && c.arch != "gemma3" && c.arch != "phi3")
    fail(cfg_path + ": model_type '" + c.arch +
         "' is not supported (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3_text, phi3 are)");
  const bool phi3 = c.arch == "phi3";
  const bool moe = model_type == "mixtral" || model_type == "qwen3_moe" || model_type == "qwen2_moe";
  const bool gemma = c.arch == "gemma2" || c.arch == "gemma3";
  if (!gemma && j.contains("hidden_act") && j["hidden_act"] != "silu") fail(cfg_path + ": hidden_act must be silu");
  // Qwen2 always has Q/K/V biases; any other bias (attention_bias: also on o_proj) is not supported.
  if (j.value("attention_bias", false) || j.value("mlp_bias", false)) fail(cfg_path + ": attention or MLP biases are not supported");
  if (c.arch == "qwen2" && j.value("use_sliding_window", false)) fail(cfg_path + ": Qwen2's use_sliding_window is not supported");
  c.qkv_bias = c.arch == "qwen2" || c.arch == "qwen2moe";
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe";
  c.name = dir;
  c.n_vocab = r.get_int("vocab_size");
  c.dim = r.get_int("hidden_size");
  c.n_layers = r.get_int("num_hidden_layers");
  c.n_heads = r.get_int("num_attention_heads");
  c.n_kv_heads = r.get_int("num_key_value_heads", c.n_heads);
  c.ffn_dim = r.get_int("intermediate_size");
  if (c.n_heads <= 0) fail(cfg_path + ": num_attention_heads must be positive");
  c.head_dim = r.get_int("head_dim", c.dim / c.n_heads);
  c.n_ctx_train = r.get_int("max_position_embeddings", 4096);
  c.rms_eps = static_cast<float>(r.get_num("rms_norm_eps", 1e-6));
  c.tied_output = j.value("tie_word_embeddings", false);
  c.sliding_window = c.arch == "mistral" ? r.get_int("sliding_window", 0) : 0;
  if (moe) {  // transformers names the expert count num_local_experts (Mixtral) or num_experts (Qwen)
    c.n_expert = r.has("num_local_experts") ? r.get_int("num_local_experts") : r.get_int("num_experts");
    c.n_expert_used = r.get_int("num_experts_per_tok");
    c.expert_norm = model_type == "mixtral" || j.value("norm_topk_prob", false);
    if (model_type == "qwen2_moe") c.shared_expert_ffn_dim = r.get_int("shared_expert_intermediate_size");
    if (model_type == "qwen3_moe" || model_type == "qwen2_moe") {
      c.ffn_dim = r.get_int("moe_intermediate_size");
      if (r.get_int("decoder_sparse_step", 1) != 1 || (j.contains("mlp_only_layers") && !j["mlp_only_layers"].empty()))
        fail(cfg_path + ": dense layers among the expert layers (decoder_sparse_step, mlp_only_layers) are not supported");
    }
  }
  c.rope_layout = RopeLayout::Half;
  if (gemma) {
    gemma_config(r, c, cfg_path);
    // transformers 5 nests the global layers' RoPE under rope_parameters.full_attention.
    json flat = j;
    if (r.has("rope_parameters") && j["rope_parameters"].contains("full_attention")) flat["rope_parameters"] = j["rope_parameters"]["full_attention"];
    read_rope(ConfigReader(flat, cfg_path), c, cfg_path);
    if (c.arch == "gemma2") c.rope_theta_swa = c.rope_theta;
  } else {
    read_rope(r, c, cfg_path);
  }
  validate_config(c, cfg_path);

  auto set = std::make_shared<SafetensorsSet>(SafetensorsSet::open_dir(dir));
  // Gemma's norm weights are stored as w for x * (1 + w): they are rewritten as 1 + w in owned
  // memory, kept alive with the mapped files.
  struct Storage {
    std::shared_ptr<SafetensorsSet> set;
    std::vector<std::vector<float>> owned;
  };
  auto storage = std::make_shared<Storage>();
  storage->set = set;
  m->storage = storage;
  if (!c.tied_output && !set->find_tensor("lm_head.weight")) c.tied_output = true;  // some checkpoints omit it
  TensorNames names{"model.embed_tokens.weight",
                    "model.norm.weight",
                    "lm_head.weight",
                    "model.layers.{}.input_layernorm.weight",
                    "model.layers.{}.self_attn.q_proj.weight",
                    "model.layers.{}.self_attn.k_proj.weight",
                    "model.layers.{}.self_attn.v_proj.weight",
                    "model.layers.{}.self_attn.o_proj.weight",
                    "model.layers.{}.post_attention_layernorm.weight",
                    "model.layers.{}.mlp.gate_proj.weight",
                    "model.layers.{}.mlp.up_proj.weight",
                    "model.layers.{}.mlp.down_proj.weight",
                    "model.layers.{}.self_attn.q_proj.bias",
                    "model.layers.{}.self_attn.k_proj.bias",
                    "model.layers.{}.self_attn.v_proj.bias",
                    "model.layers.{}.self_attn.q_norm.weight",
                    "model.layers.{}.self_attn.k_norm.weight",
                    "model.layers.{}.post_attention_layernorm.weight",
                    "model.layers.{}.post_feedforward_layernorm.weight"};
  if (gemma) names.ffn_norm = "model.layers.{}.pre_feedforward_layernorm.weight";
  if (model_type == "mixtral") {
    names.router = "model.layers.{}.block_sparse_moe.gate.weight";
    names.exp_gate = "model.layers.{}.block_sparse_moe.experts.{e}.w1.weight";
    names.exp_up = "model.layers.{}.block_sparse_moe.experts.{e}.w3.weight";
    names.exp_down = "model.layers.{}.block_sparse_moe.experts.{e}.w2.weight";
  } else if (moe) {
    names.router = "model.layers.{}.mlp.gate.weight";
    names.exp_gate = "model.layers.{}.mlp.experts.{e}.gate_proj.weight";
    names.exp_up = "model.layers.{}.mlp.experts.{e}.up_proj.weight";
    names.exp_down = "model.layers.{}.mlp.experts.{e}.down_proj.weight";
    names.shexp_gate = "model.layers.{}.mlp.shared_expert.gate_proj.weight";
    names.shexp_up = "model.layers.{}.mlp.shared_expert.up_proj.weight";
    names.shexp_down = "model.layers.{}.mlp.shared_expert.down_proj.weight";
    names.shexp_router = "model.layers.{}.mlp.shared_expert_gate.weight";
  }
  if (phi3) {  // fused Q/K/V and gate/up; the sliding window is not applied, as in llama.cpp (model_gguf.cpp)
    names.wqkv = "model.layers.{}.self_attn.qkv_proj.weight";
    names.w_gate_up = "model.layers.{}.mlp.gate_up_proj.weight";
  }
  std::vector<TensorView> shifted;  // stable addresses for the views handed to bind_weights
  shifted.reserve(static_cast<size_t>(6 * c.n_layers + 1));
  auto find = [&](const std::string& n) -> const TensorView* {
    const TensorView* t = set->find_tensor(n);
    const bool norm = n.size() > 11 && n.compare(n.size() - 11, 11, "norm.weight") == 0;
    if (!gemma || !t || !norm || t->ne.size() != 1) return t;
    std::vector<float> v(static_cast<size_t>(t->ne[0]));
    dequantize_row(t->type, t->data, v.data(), t->ne[0]);
    for (float& x : v) x += 1.0f;
    storage->owned.push_back(std::move(v));
    TensorView s = *t;
    s.type = DType::F32;
    s.data = reinterpret_cast<const uint8_t*>(storage->owned.back().data());
    s.nbytes = storage->owned.back().size() * sizeof(float);
    shifted.push_back(s);
    return &shifted.back();
  };
  bind_weights(*m, find, names, dir);

  if (file_exists(dir + "/tokenizer.json")) {
    m->vocab = read_tokenizer_json(dir + "/tokenizer.json", j);
    if (m->vocab.tokens.size() > static_cast<size_t>(c.n_vocab))
      fail(dir + "/tokenizer.json: " + std::to_string(m->vocab.tokens.size()) + " tokens but the model has " + std::to_string(c.n_vocab));
  }
  return m;
}

}  // namespace slake::detail
