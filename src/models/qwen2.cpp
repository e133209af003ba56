// Qwen2 / Qwen2.5: Llama's layer with a bias on the Q, K and V projections (rotate-half RoPE,
// which the loader records as the model's RoPE layout); Qwen2-MoE's feed-forward is a mixture of
// experts with a shared expert (swiglu_ffn).
#include "models/models.h"

namespace slake {

void qwen2_layer(const ModelConfig& c, LayerOps& o) {
  norm_and_project_qkv(c, o);
  o.add_bias(Act::Q, Weight::Bq);
  o.add_bias(Act::K, Weight::Bk);
  o.add_bias(Act::V, Weight::Bv);
  rope_attend_and_add(c, o);
  swiglu_ffn(c, o);
}

}  // namespace slake
