// Qwen3 (dense, and Qwen3-MoE with its mixture of experts: swiglu_ffn): Llama's layer with each
// head of Q and K RMS-normalised (q_norm, k_norm) before RoPE; head_dim is its own
// hyperparameter, not dim / n_heads.
#include "models/models.h"

namespace slake {

void qwen3_layer(const ModelConfig& c, LayerOps& o) {
  norm_and_project_qkv(c, o);
  o.rmsnorm_heads(Act::Q, Weight::QNorm, c.n_heads, c.rms_eps);
  o.rmsnorm_heads(Act::K, Weight::KNorm, c.n_kv_heads, c.rms_eps);
  rope_attend_and_add(c, o);
  swiglu_ffn(c, o);
}

}  // namespace slake
