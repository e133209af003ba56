// One description of a Llama-family model, whichever file format it came from: hyperparameters,
// the vocabulary as stored, and zero-copy views of every weight.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "slake/quant/tensor.h"
#include "slake/tokenizer/vocab.h"

namespace slake {

// How RoPE pairs the dimensions of a head. llama.cpp's converter permutes the Q/K rows so GGUF
// files rotate adjacent pairs (2i, 2i+1); Hugging Face checkpoints rotate (i, i + d/2). Both give
// the same attention scores; the engine applies the layout of the file it loaded.
enum class RopeLayout { Adjacent, Half };

struct ModelConfig {
  std::string arch;  // "llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3" or "phi3" (src/models/models.cpp)
  std::string name;
  int n_vocab = 0;
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeLayout rope_layout = RopeLayout::Adjacent;
  // Frequency i of a head (i < head_dim/2) is theta^(-2i/head_dim) / rope_freq_factors[i];
  // empty means all ones. Llama 3.1 scaling and linear scaling are both expressed this way.
  std::vector<float> rope_freq_factors;
  // LongRoPE (Phi-3's 128K models): the divisors for a context longer than n_ctx_orig, where
  // rope_freq_factors holds those for shorter ones (llama.cpp chooses by the context size, as
  // rope_factors_for does), and the factor by which RoPE multiplies cos and sin at any length.
  std::vector<float> rope_freq_factors_long;
  int n_ctx_orig = 0;
  float rope_attn_factor = 1.0f;
  int sliding_window = 0;  // 0: none; otherwise key j is visible to query i iff i - window < j <= i
  // Gemma 3's local/global layers: when not empty, layer l attends within sliding_window iff
  // swa_layers[l] (a global layer sees every key); empty: every layer as sliding_window says.
  std::vector<uint8_t> swa_layers;
  // RoPE base of the sliding layers when swa_layers is set (their frequencies take no
  // rope_freq_factors: scaling is the global layers').
  float rope_theta_swa = 10000.0f;
  bool tied_output = false;
  bool qkv_bias = false;    // qwen2: the Q, K and V projections add a bias
  bool qk_norm = false;     // qwen3, gemma3: each head of Q and K is RMS-normalised before RoPE
  bool post_norms = false;  // gemma2, gemma3: the attention and FFN outputs are RMS-normalised before they are added
  float embed_scale = 1.0f;  // the embeddings are multiplied by this (gemma2, gemma3: sqrt(dim))
  // Gemma 2's soft-capping (0: none): every attention logit x (q . k / sqrt(head_dim)) becomes
  // attn_softcap * tanh(x / attn_softcap) before the softmax, in every attention path and in the
  // statistics KV policies take; the output logits likewise with final_softcap.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Mixture of experts (Mixtral's `llama` files, qwen3moe): every layer's feed-forward is n_expert
  // SwiGLU experts of ffn_dim, of which a router picks n_expert_used per token (moe.h).
  int n_expert = 0;
  int n_expert_used = 0;
  bool expert_norm = true;  // the chosen experts' probabilities are renormalised to sum 1
  // qwen2moe: a shared expert of this width that every token runs, its output scaled by
  // sigmoid(x . shexp_router) and added to the mixture's (0: none).
  int shared_expert_ffn_dim = 0;

  // The RoPE frequency divisors of a context of n_ctx tokens.
  const std::vector<float>& rope_factors_for(int n_ctx) const {
    return !rope_freq_factors_long.empty() && n_ctx > n_ctx_orig ? rope_freq_factors_long : rope_freq_factors;
  }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int group_size() const { return n_heads / n_kv_heads; }
  // The window layer l attends within (0: every key).
  int layer_window(int l) const {
    return swa_layers.empty() ? sliding_window : swa_layers[static_cast<size_t>(l)] ? sliding_window : 0;
  }
  // Whether layer l is a local (sliding) layer of a model with local and global layers: it rotates
  // by rope_theta_swa rather than rope_theta and rope_freq_factors, and its cache keeps only the
  // rows its window can still see.
  bool layer_local(int l) const { return !swa_layers.empty() && swa_layers[static_cast<size_t>(l)]; }
  // The first position that a query after position `last` still sees in a local layer: its
  // window ends at the query, so rows below this one can leave the cache.
  int32_t local_first_visible(int32_t last) const { return last + 2 - sliding_window; }
  // The layers a KV policy manages (evicts, budgets, compensates): all of them, except the sliding
  // layers of a model with local and global layers, whose caches keep just their window.
  std::vector<int> kv_policy_layers() const {
    std::vector<int> out;
    for (int l = 0; l < n_layers; ++l)
      if (!layer_local(l)) out.push_back(l);
    return out;
  }
};

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo;
  TensorView ffn_norm, w_gate, w_up, w_down;
  TensorView bq, bk, bv;     // with qkv_bias, else empty
  TensorView q_norm, k_norm;  // with qk_norm ([head_dim]), else empty
  TensorView attn_post_norm, ffn_post_norm;  // with post_norms ([dim]), else empty
  // With experts (w_gate, w_up, w_down empty): the router [dim -> n_expert] and each expert's
  // matrices (views of the file's stacked tensors, or the checkpoint's own tensors).
  TensorView router;
  std::vector<TensorView> exp_gate, exp_up, exp_down;
  // With a shared expert: its matrices, and its gate [dim -> 1].
  TensorView shexp_gate, shexp_up, shexp_down, shexp_router;
};

// Data a backend derives from the weights once and shares between its contexts (the CPU path's
// repacked matrices, cpu/cpu_weights.h), made by the first caller.
struct DerivedWeights {
  std::once_flag once;
  std::shared_ptr<const void> data;
};

struct Model {
  ModelConfig cfg;
  Vocab vocab;
  TensorView tok_embd, output_norm, output;  // output aliases tok_embd when tied
  std::vector<LayerWeights> layers;
  std::string path;
  std::string format;  // "gguf" or "hf"
  std::shared_ptr<const void> storage;  // keeps the mapped files alive
  // Hands the pages of a weight's bytes back to the OS when they can be read again (file
  // mappings); unset for weights in owned memory.
  std::function<void(const uint8_t*, size_t)> release_pages;
  std::shared_ptr<DerivedWeights> derived = std::make_shared<DerivedWeights>();

  // Every weight tensor once (the output matrix only when it is not the embedding table).
  std::vector<const TensorView*> weights() const;
  size_t weight_bytes() const;
};

// Loads a GGUF file or a Hugging Face directory (config.json + safetensors [+ tokenizer.json]).
// Throws slake::Error with a one-line message naming the file and the problem.
std::unique_ptr<Model> load_model(const std::string& path);

class GgufFile;
// Builds a model from an already parsed GGUF file (the loader's second half; fuzzed on its own).
std::unique_ptr<Model> model_from_gguf(std::shared_ptr<const GgufFile> file);

// Exposed for tests: the Llama 3 ("llama3" rope type) frequency divisors.
std::vector<float> llama3_rope_factors(int head_dim, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, float original_max_pos);

}  // namespace slake
