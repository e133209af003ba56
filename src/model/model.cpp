// Parts of model loading shared by both formats: Llama 3 RoPE factors, shape validation, sizes.
#include "slake/model/model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>

#include "model_internal.h"
#include "slake/error.h"

namespace slake {

std::vector<float> llama3_rope_factors(int head_dim, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, float original_max_pos) {
  std::vector<float> out(static_cast<size_t>(head_dim / 2));
  const double low_wavelen = original_max_pos / low_freq_factor;
  const double high_wavelen = original_max_pos / high_freq_factor;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const double wavelen = 2.0 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = factor;
    } else {
      const double smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

std::vector<const TensorView*> Model::weights() const {
  std::vector<const TensorView*> w{&tok_embd, &output_norm};
  if (!cfg.tied_output) w.push_back(&output);
  for (const LayerWeights& l : layers)
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down, &l.bq, &l.bk,
                                &l.bv, &l.q_norm, &l.k_norm, &l.attn_post_norm, &l.ffn_post_norm, &l.router, &l.shexp_gate,
                                &l.shexp_up, &l.shexp_down, &l.shexp_router})
      if (t->data) w.push_back(t);
  for (const LayerWeights& l : layers)
    for (const std::vector<TensorView>* e : {&l.exp_gate, &l.exp_up, &l.exp_down})
      for (const TensorView& t : *e) w.push_back(&t);
  return w;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const TensorView* t : weights()) n += t->nbytes;
  return n;
}

namespace detail {

void validate_config(const ModelConfig& c, const std::string& file) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail(file + ": " + what);
  };
  need(c.n_vocab > 0, "vocabulary size must be positive");
  need(c.dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.ffn_dim > 0 && c.head_dim > 0,
       "model dimensions must be positive");
  need(c.n_layers <= 4096 && c.n_heads <= 4096 && c.head_dim <= 4096 && c.dim <= (1 << 20) && c.ffn_dim <= (1 << 22),
       "model dimensions are absurd");
  need(c.n_heads % c.n_kv_heads == 0, "head count " + std::to_string(c.n_heads) + " is not a multiple of the KV head count " +
                                          std::to_string(c.n_kv_heads));
  need(c.head_dim % 2 == 0, "head dimension " + std::to_string(c.head_dim) + " is odd");
  need(c.rms_eps > 0 && std::isfinite(c.rms_eps), "RMS norm epsilon must be positive");
  need(c.rope_theta > 0 && std::isfinite(c.rope_theta), "RoPE theta must be positive");
  need(c.sliding_window >= 0, "sliding window must not be negative");
  need(c.swa_layers.empty() || c.swa_layers.size() == static_cast<size_t>(c.n_layers),
       "the sliding-window layer pattern must name every layer");
  need(c.swa_layers.empty() || c.sliding_window > 0, "sliding-window layers need a sliding window");
  need(c.rope_theta_swa > 0 && std::isfinite(c.rope_theta_swa), "the sliding layers' RoPE theta must be positive");
  need(c.embed_scale > 0 && std::isfinite(c.embed_scale), "the embedding scale must be positive");
  need(c.attn_softcap >= 0 && std::isfinite(c.attn_softcap), "the attention logit soft-cap must be 0 (none) or positive");
  // Gemma 2 scales both kinds of layer alike (llama.cpp, transformers), where the local layers take
  // no rope_freq_factors (Gemma 3's rule, ModelConfig::swa_layers).
  need(c.arch != "gemma2" || c.rope_freq_factors.empty(), "RoPE scaling of Gemma 2 is not supported");
  need(c.final_softcap >= 0 && std::isfinite(c.final_softcap), "the final logit soft-cap must be 0 (none) or positive");
  need(c.rope_freq_factors.empty() || c.rope_freq_factors.size() == static_cast<size_t>(c.head_dim / 2),
       "RoPE frequency factors must have head_dim/2 entries");
  for (float f : c.rope_freq_factors) need(f > 0 && std::isfinite(f), "RoPE frequency factors must be positive");
  need(c.rope_freq_factors_long.empty() || c.rope_freq_factors_long.size() == static_cast<size_t>(c.head_dim / 2),
       "long RoPE frequency factors must have head_dim/2 entries");
  for (float f : c.rope_freq_factors_long) need(f > 0 && std::isfinite(f), "RoPE frequency factors must be positive");
  need(c.rope_freq_factors_long.empty() || c.n_ctx_orig > 0, "long RoPE factors need the original context length");
  need(c.rope_attn_factor > 0 && std::isfinite(c.rope_attn_factor), "the RoPE attention factor must be positive");
  need(c.n_expert >= 0 && c.n_expert <= 1024, "the expert count must be between 0 and 1024");
  need(c.shared_expert_ffn_dim >= 0 && c.shared_expert_ffn_dim <= (1 << 22) && (c.shared_expert_ffn_dim == 0 || c.n_expert > 0),
       "a shared expert needs experts, and a sane width");
  need(c.n_expert == 0 || (c.n_expert_used >= 1 && c.n_expert_used <= c.n_expert),
       "the experts used per token (" + std::to_string(c.n_expert_used) + ") must be between 1 and the expert count (" +
           std::to_string(c.n_expert) + ")");
}

std::vector<uint8_t> local_layer_pattern(int n_layers, int64_t period) {
  std::vector<uint8_t> out(static_cast<size_t>(std::max(0, n_layers)));
  for (int l = 0; l < n_layers; ++l) out[static_cast<size_t>(l)] = period <= 0 || l % period < period - 1;
  return out;
}

TensorView rows_of(const TensorView& t, int64_t r0, int64_t n, const std::string& name) {
  const size_t rb = row_bytes(t.type, t.row_len());
  TensorView v = t;
  v.name = name;
  v.ne = {t.row_len(), n};
  v.data = t.data + static_cast<size_t>(r0) * rb;
  v.nbytes = static_cast<size_t>(n) * rb;
  return v;
}

const TensorView& check_tensor(const TensorView* t, const std::string& name, std::vector<int64_t> ne, const std::string& file) {
  if (!t) fail(file + ": missing tensor " + name);
  if (t->ne != ne)
    fail(file + ": tensor " + name + " has shape " + shape_string(t->ne) + ", expected " + shape_string(ne));
  return *t;
}

void bind_weights(Model& m, const std::function<const TensorView*(const std::string&)>& find, const TensorNames& names,
                  const std::string& file) {
  const ModelConfig& c = m.cfg;
  const int64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ff = c.ffn_dim, V = c.n_vocab;
  m.tok_embd = check_tensor(find(names.tok_embd), names.tok_embd, {dim, V}, file);
  m.output_norm = check_tensor(find(names.output_norm), names.output_norm, {dim}, file);
  m.output = m.cfg.tied_output ? m.tok_embd : check_tensor(find(names.output), names.output, {dim, V}, file);
  m.layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    auto name_of = [&](const std::string& pattern) {
      std::string n = pattern;
      n.replace(n.find("{}"), 2, std::to_string(l));
      return n;
    };
    auto get = [&](const std::string& pattern, std::vector<int64_t> ne) {
      const std::string n = name_of(pattern);
      return check_tensor(find(n), n, std::move(ne), file);
    };
    LayerWeights& L = m.layers[static_cast<size_t>(l)];
    L.attn_norm = get(names.attn_norm, {dim});
    if (!names.wqkv.empty() && find(name_of(names.wqkv))) {
      const TensorView& f = get(names.wqkv, {dim, q + 2 * kv});
      L.wq = rows_of(f, 0, q, f.name + "[q]");
      L.wk = rows_of(f, q, kv, f.name + "[k]");
      L.wv = rows_of(f, q + kv, kv, f.name + "[v]");
    } else {
      L.wq = get(names.wq, {dim, q});
      L.wk = get(names.wk, {dim, kv});
      L.wv = get(names.wv, {dim, kv});
    }
    L.wo = get(names.wo, {q, dim});
    L.ffn_norm = get(names.ffn_norm, {dim});
    if (c.n_expert > 0) {
      L.router = get(names.router, {dim, c.n_expert});
      auto experts = [&](const std::string& pattern, int64_t in, int64_t out, std::vector<TensorView>& dst) {
        const size_t at = pattern.find("{e}");
        if (at == std::string::npos) {
          const TensorView& f = get(pattern, {in, out, c.n_expert});
          for (int e = 0; e < c.n_expert; ++e) dst.push_back(rows_of(f, e * out, out, f.name + "[" + std::to_string(e) + "]"));
          return;
        }
        for (int e = 0; e < c.n_expert; ++e) dst.push_back(get(std::string(pattern).replace(at, 3, std::to_string(e)), {in, out}));
      };
      experts(names.exp_gate, dim, ff, L.exp_gate);
      experts(names.exp_up, dim, ff, L.exp_up);
      experts(names.exp_down, ff, dim, L.exp_down);
      if (c.shared_expert_ffn_dim > 0) {
        const int64_t sff = c.shared_expert_ffn_dim;
        L.shexp_gate = get(names.shexp_gate, {dim, sff});
        L.shexp_up = get(names.shexp_up, {dim, sff});
        L.shexp_down = get(names.shexp_down, {sff, dim});
        // One output row: llama.cpp stores it as a vector [dim], transformers as a matrix [1][dim].
        const std::string n = name_of(names.shexp_router);
        const TensorView* g = find(n);
        L.shexp_router = check_tensor(g, n, g && g->ne.size() == 1 ? std::vector<int64_t>{dim} : std::vector<int64_t>{dim, 1}, file);
        L.shexp_router.ne = {dim, 1};
      }
    } else if (!names.w_gate_up.empty()) {
      const TensorView& f = get(names.w_gate_up, {dim, 2 * ff});
      L.w_gate = rows_of(f, 0, ff, f.name + "[gate]");
      L.w_up = rows_of(f, ff, ff, f.name + "[up]");
    } else {
      L.w_gate = get(names.w_gate, {dim, ff});
      L.w_up = get(names.w_up, {dim, ff});
    }
    if (c.n_expert == 0) L.w_down = get(names.w_down, {ff, dim});
    if (c.qkv_bias) {
      L.bq = get(names.bq, {q});
      L.bk = get(names.bk, {kv});
      L.bv = get(names.bv, {kv});
    }
    if (c.qk_norm) {
      L.q_norm = get(names.q_norm, {c.head_dim});
      L.k_norm = get(names.k_norm, {c.head_dim});
    }
    if (c.post_norms) {
      L.attn_post_norm = get(names.attn_post_norm, {dim});
      L.ffn_post_norm = get(names.ffn_post_norm, {dim});
    }
  }
}

}  // namespace detail

std::unique_ptr<Model> load_model(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path + ": no such file or directory");
  std::unique_ptr<Model> m = S_ISDIR(st.st_mode) ? detail::load_hf_dir(path) : detail::load_gguf(path);
  m->path = path;
  return m;
}

}  // namespace slake
