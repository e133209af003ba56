// Internal to model loading: the pieces the GGUF and Hugging Face loaders share.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "slake/model/model.h"

namespace slake::detail {

// Tensor names of one format; "{}" stands for the layer index.
struct TensorNames {
  std::string tok_embd, output_norm, output;
  std::string attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
  std::string bq, bk, bv, q_norm, k_norm;  // bound with qkv_bias / qk_norm only
  std::string attn_post_norm, ffn_post_norm;  // bound with post_norms only
  // Fused tensors (Phi-3), split into the views above when named: Q, K and V in one matrix of
  // q_dim + 2 kv_dim rows (used when the file has it), gate and up in one of 2 ffn_dim rows.
  std::string wqkv{}, w_gate_up{};
  // With experts (ModelConfig::n_expert): the router and the experts' matrices. A name with "{e}"
  // is one tensor per expert; without it, one stacked tensor [in, out, n_expert] split by rows.
  std::string router{}, exp_gate{}, exp_up{}, exp_down{};
  std::string shexp_gate{}, shexp_up{}, shexp_down{}, shexp_router{};  // with a shared expert (qwen2moe)
};

void validate_config(const ModelConfig& c, const std::string& file);
// Gemma's local/global pattern by its period (ModelConfig::swa_layers): the last layer of every
// `period` is global, the others local; a period of 0 or less makes every layer local.
std::vector<uint8_t> local_layer_pattern(int n_layers, int64_t period);
// Rows [r0, r0 + n) of a matrix in its file layout, as a matrix of its own.
TensorView rows_of(const TensorView& t, int64_t r0, int64_t n, const std::string& name);
const TensorView& check_tensor(const TensorView* t, const std::string& name, std::vector<int64_t> ne, const std::string& file);
// Finds every weight by name and checks its shape against the config.
void bind_weights(Model& m, const std::function<const TensorView*(const std::string&)>& find, const TensorNames& names,
                  const std::string& file);

std::unique_ptr<Model> load_gguf(const std::string& path);
std::unique_ptr<Model> load_hf_dir(const std::string& dir);

}  // namespace slake::detail
