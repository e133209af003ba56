// Model loading from a GGUF file written by llama.cpp's converters (architectures "llama",
// "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3"; Mixtral is "llama" with experts; llama.cpp's
// src/llama-arch.cpp names their keys and tensors).
#include <algorithm>
#include <cmath>
#include <limits>

#include "model_internal.h"
#include "slake/error.h"
#include "slake/format/gguf.h"
#include "slake/tokenizer/vocab_readers.h"

namespace slake {
namespace detail {

namespace {

int to_int(uint64_t v, const std::string& file, const std::string& key) {
  if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    fail(file + ": key " + key + " value " + std::to_string(v) + " is too large");
  return static_cast<int>(v);
}

// Gemma 2 and 3 (llama.cpp's src/models/gemma2.cpp, gemma3.cpp): scaled embeddings, post-norms,
// and with a sliding window local layers (attention.sliding_window_pattern: the period, or one
// flag per layer; every other layer for Gemma 2, five of every six for Gemma 3). Gemma 2
// soft-caps its attention and output logits (50 and 30 when the file does not say), and its local
// layers share the global RoPE base; Gemma 3's local base is rope.freq_base_swa (10000 when
// absent) and it soft-caps only the output, only when the file says so.
void gemma_hparams(const GgufFile& g, ModelConfig& c) {
  const std::string& f = g.name();
  const std::string a = c.arch + ".";
  const bool gemma2 = c.arch == "gemma2";
  c.post_norms = true;
  c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  c.attn_softcap = gemma2 ? static_cast<float>(g.get_float(a + "attn_logit_softcapping", 50.0)) : 0.0f;
  c.final_softcap = static_cast<float>(g.get_float(a + "final_logit_softcapping", gemma2 ? 30.0 : 0.0));
  // Gemma 2's window is 4096 when the file does not say (llama.cpp's default), or the training
  // context where that is shorter (the same attention).
  if (gemma2 && !g.has(a + "attention.sliding_window")) c.sliding_window = std::min(4096, c.n_ctx_train);
  // llama.cpp scales the 27B models' queries by 1/sqrt(dim / heads) rather than 1/sqrt(head_dim).
  if (c.n_layers == (gemma2 ? 46 : 62) && c.dim / c.n_heads != c.head_dim)
    fail(f + ": the 27B model's query scale (1/sqrt(dim / heads), not 1/sqrt(head_dim)) is not supported");
  if (c.sliding_window <= 0) return;
  c.rope_theta_swa = static_cast<float>(g.get_float(a + "rope.freq_base_swa", gemma2 ? c.rope_theta : 10000.0));
  const std::string pk = a + "attention.sliding_window_pattern";
  c.swa_layers.assign(static_cast<size_t>(c.n_layers), 0);
  const GgufValue* pv = g.find(pk);
  if (pv && pv->type == GgufType::ARRAY) {
    if (pv->arr.size() != static_cast<size_t>(c.n_layers))
      fail(f + ": " + pk + " has " + std::to_string(pv->arr.size()) + " entries for " + std::to_string(c.n_layers) + " layers");
    for (size_t l = 0; l < pv->arr.size(); ++l) {
      const GgufValue& e = pv->arr[l];
      if (e.type != GgufType::BOOL && !e.is_integer()) fail(f + ": " + pk + " must hold flags");
      c.swa_layers[l] = e.type == GgufType::BOOL ? e.u != 0 : e.is_integer() && (e.u != 0 || e.i != 0);
    }
  } else {
    const uint64_t period = pv ? g.get_uint(pk) : gemma2 ? 2 : 6;
    if (period > static_cast<uint64_t>(c.n_layers) + 1) fail(f + ": " + pk + " is larger than the layer count");
    c.swa_layers = local_layer_pattern(c.n_layers, static_cast<int64_t>(period));
  }
  if (c.sliding_window > c.n_ctx_train)
    fail(f + ": the sliding window (" + std::to_string(c.sliding_window) + ") is larger than the training context (" +
         std::to_string(c.n_ctx_train) + ")");
}

}  // namespace

std::unique_ptr<Model> load_gguf(const std::string& path) {
  return model_from_gguf(std::make_shared<GgufFile>(GgufFile::open(path)));
}

}  // namespace detail

std::unique_ptr<Model> model_from_gguf(std::shared_ptr<const GgufFile> g) {
  using namespace detail;
  const std::string& f = g->name();
  auto m = std::make_unique<Model>();
  m->format = "gguf";
  m->storage = g;
  m->release_pages = [buf = g->buffer()](const uint8_t* p, size_t n) { buf->release_pages(p, n); };
  ModelConfig& c = m->cfg;
  c.arch = g->get_string("general.architecture");
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen2moe" && c.arch != "qwen3" && c.arch != "qwen3moe" &&
      c.arch != "gemma2" && c.arch != "gemma3" && c.arch != "phi3")
    fail(f + ": architecture '" + c.arch + "' is not supported (llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3 are)");
  const bool qwen = c.arch == "qwen2" || c.arch == "qwen2moe" || c.arch == "qwen3" || c.arch == "qwen3moe",
             gemma = c.arch == "gemma2" || c.arch == "gemma3", phi3 = c.arch == "phi3";
  const std::string a = c.arch + ".";
  c.name = g->get_string("general.name", "");
  auto geti = [&](const std::string& k) { return to_int(g->get_uint(a + k), f, a + k); };
  c.dim = geti("embedding_length");
  c.n_layers = geti("block_count");
  c.ffn_dim = geti("feed_forward_length");
  c.n_heads = geti("attention.head_count");
  c.n_kv_heads = to_int(g->get_uint(a + "attention.head_count_kv", static_cast<uint64_t>(c.n_heads)), f, a + "attention.head_count_kv");
  c.n_ctx_train = geti("context_length");
  c.rms_eps = static_cast<float>(g->get_float(a + "attention.layer_norm_rms_epsilon"));
  c.rope_theta = static_cast<float>(g->get_float(a + "rope.freq_base", 10000.0));
  if (c.n_heads <= 0) fail(f + ": head count must be positive");
  c.head_dim = to_int(g->get_uint(a + "attention.key_length", static_cast<uint64_t>(c.dim / c.n_heads)), f, a + "attention.key_length");
  const int v_len = to_int(g->get_uint(a + "attention.value_length", static_cast<uint64_t>(c.head_dim)), f, a + "attention.value_length");
  if (v_len != c.head_dim) fail(f + ": key and value head sizes differ (" + std::to_string(c.head_dim) + " vs " + std::to_string(v_len) + ")");
  const int rope_dims = to_int(g->get_uint(a + "rope.dimension_count", static_cast<uint64_t>(c.head_dim)), f, a + "rope.dimension_count");
  if (rope_dims != c.head_dim)
    fail(f + ": partial RoPE (" + std::to_string(rope_dims) + " of " + std::to_string(c.head_dim) + " dimensions) is not supported");
  c.sliding_window = to_int(g->get_uint(a + "attention.sliding_window", 0), f, a + "attention.sliding_window");
  // Phi-3's files carry the sliding window of its Hugging Face config, which llama.cpp 0c1e570
  // disables (src/models/phi3.cpp: every layer attends to the whole context); so does the engine.
  if (phi3) c.sliding_window = 0;
  // llama.cpp's converter permutes Llama's Q/K rows to adjacent pairs; Qwen's, Gemma's and Phi-3's
  // stay rotate-half (llama.cpp's NEOX RoPE type).
  c.rope_layout = qwen || gemma || phi3 ? RopeLayout::Half : RopeLayout::Adjacent;
  c.qkv_bias = c.arch == "qwen2" || c.arch == "qwen2moe";
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3";
  // Experts (Mixtral's llama files, qwen3moe): llama.cpp renormalises the chosen experts' weights
  // for both. qwen3moe's experts have their own width (expert_feed_forward_length).
  c.n_expert = to_int(g->get_uint(a + "expert_count", 0), f, a + "expert_count");
  c.n_expert_used = to_int(g->get_uint(a + "expert_used_count", 0), f, a + "expert_used_count");
  if (c.n_expert > 0 && g->has(a + "expert_feed_forward_length")) c.ffn_dim = geti("expert_feed_forward_length");
  if (c.n_expert == 0 && g->find_tensor("blk.0.ffn_gate_inp.weight"))
    fail(f + ": the file has expert tensors (blk.0.ffn_gate_inp.weight) but no " + a + "expert_count");
  if (c.n_expert == 0 && (c.arch == "qwen3moe" || c.arch == "qwen2moe")) fail(f + ": architecture " + c.arch + " needs " + a + "expert_count");
  // qwen2moe (llama.cpp's src/models/qwen2moe.cpp): the chosen experts' weights are not renormalised,
  // and a shared expert (its width defaults to feed_forward_length) joins them through a sigmoid gate.
  if (c.arch == "qwen2moe") {
    c.expert_norm = false;
    c.shared_expert_ffn_dim = g->has(a + "expert_shared_feed_forward_length") ? geti("expert_shared_feed_forward_length")
                                                                              : geti("feed_forward_length");
  }
  if (c.n_expert > 0 && phi3) fail(f + ": Phi-3 with experts is not supported");
  if (gemma) gemma_hparams(*g, c);

  const std::string scaling = g->get_string(a + "rope.scaling.type", "none");
  if (scaling == "linear") {
    const double factor = g->get_float(a + "rope.scaling.factor");
    if (!(factor > 0)) fail(f + ": rope.scaling.factor must be positive");
    c.rope_freq_factors.assign(static_cast<size_t>(c.head_dim / 2), static_cast<float>(factor));
  } else if (scaling != "none") {
    fail(f + ": RoPE scaling type '" + scaling + "' is not supported");
  }
  // Per-frequency divisors stored as tensors (empty when absent).
  auto factors = [&](const std::string& name) {
    std::vector<float> ff;
    if (const TensorView* rf = g->find_tensor(name)) {
      if (rf->type != DType::F32 || rf->ne != std::vector<int64_t>{c.head_dim / 2})
        fail(f + ": " + name + " must be F32 of shape [" + std::to_string(c.head_dim / 2) + "]");
      ff.resize(static_cast<size_t>(c.head_dim / 2));
      dequantize_row(DType::F32, rf->data, ff.data(), c.head_dim / 2);
    }
    return ff;
  };
  if (const std::vector<float> ff = factors("rope_freqs.weight"); !ff.empty()) {
    if (c.rope_freq_factors.empty()) c.rope_freq_factors = ff;
    else for (size_t i = 0; i < ff.size(); ++i) c.rope_freq_factors[i] *= ff[i];
  }
  // LongRoPE (Phi-3 128K): short and long divisors, the original context that chooses between
  // them, and the factor on cos and sin (the converter's attn_factor).
  c.rope_freq_factors_long = factors("rope_factors_long.weight");
  if (std::vector<float> shorter = factors("rope_factors_short.weight"); !c.rope_freq_factors_long.empty()) {
    if (shorter.empty()) fail(f + ": rope_factors_long.weight without rope_factors_short.weight");
    if (!c.rope_freq_factors.empty()) fail(f + ": LongRoPE factors together with other RoPE scaling are not supported");
    c.rope_freq_factors = std::move(shorter);
  }
  c.n_ctx_orig = to_int(g->get_uint(a + "rope.scaling.original_context_length", static_cast<uint64_t>(c.n_ctx_train)), f,
                        a + "rope.scaling.original_context_length");
  c.rope_attn_factor = static_cast<float>(g->get_float(a + "rope.scaling.attn_factor", 1.0));

  const TensorView* emb = g->find_tensor("token_embd.weight");
  if (!emb) fail(f + ": missing tensor token_embd.weight");
  if (emb->ne.size() != 2) fail(f + ": token_embd.weight must be 2-D, has shape " + shape_string(emb->ne));
  if (emb->ne[1] > std::numeric_limits<int32_t>::max()) fail(f + ": vocabulary too large");
  c.n_vocab = static_cast<int>(emb->ne[1]);
  if (g->has(a + "vocab_size") && static_cast<int64_t>(g->get_uint(a + "vocab_size")) != c.n_vocab)
    fail(f + ": " + a + "vocab_size disagrees with token_embd.weight");
  c.tied_output = g->find_tensor("output.weight") == nullptr;
  validate_config(c, f);

  m->vocab = read_vocab(*g);
  if (!m->vocab.tokens.empty() && m->vocab.tokens.size() > static_cast<size_t>(c.n_vocab))
    fail(f + ": the vocabulary has " + std::to_string(m->vocab.tokens.size()) + " tokens but the model only " + std::to_string(c.n_vocab));

  TensorNames names;
  names.tok_embd = "token_embd.weight";
  names.output_norm = "output_norm.weight";
  names.output = "output.weight";
  names.attn_norm = "blk.{}.attn_norm.weight";
  names.wq = "blk.{}.attn_q.weight";
  names.wk = "blk.{}.attn_k.weight";
  names.wv = "blk.{}.attn_v.weight";
  names.wo = "blk.{}.attn_output.weight";
  names.ffn_norm = "blk.{}.ffn_norm.weight";
  names.w_gate = "blk.{}.ffn_gate.weight";
  names.w_up = "blk.{}.ffn_up.weight";
  names.w_down = "blk.{}.ffn_down.weight";
  names.bq = "blk.{}.attn_q.bias";
  names.bk = "blk.{}.attn_k.bias";
  names.bv = "blk.{}.attn_v.bias";
  names.q_norm = "blk.{}.attn_q_norm.weight";
  names.k_norm = "blk.{}.attn_k_norm.weight";
  names.attn_post_norm = "blk.{}.post_attention_norm.weight";
  names.ffn_post_norm = "blk.{}.post_ffw_norm.weight";
  if (c.n_expert > 0) {
    names.router = "blk.{}.ffn_gate_inp.weight";
    names.exp_gate = "blk.{}.ffn_gate_exps.weight";
    names.exp_up = "blk.{}.ffn_up_exps.weight";
    names.exp_down = "blk.{}.ffn_down_exps.weight";
    names.shexp_gate = "blk.{}.ffn_gate_shexp.weight";
    names.shexp_up = "blk.{}.ffn_up_shexp.weight";
    names.shexp_down = "blk.{}.ffn_down_shexp.weight";
    names.shexp_router = "blk.{}.ffn_gate_inp_shexp.weight";
  }
  if (phi3) {  // fused Q/K/V (unless the file splits them) and gate/up
    names.wqkv = "blk.{}.attn_qkv.weight";
    names.w_gate_up = "blk.{}.ffn_up.weight";
  }
  bind_weights(*m, [&](const std::string& n) { return g->find_tensor(n); }, names, f);
  return m;
}

}  // namespace slake
