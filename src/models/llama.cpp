// Llama (and Mistral, whose sliding window the attention operation honours, and Mixtral, whose
// feed-forward is a mixture of experts: swiglu_ffn): pre-norm attention with RoPE and grouped KV
// heads, then a SwiGLU feed-forward, each added to the residual stream.
#include "models/models.h"

namespace slake {

void llama_layer(const ModelConfig& c, LayerOps& o) {
  norm_and_project_qkv(c, o);
  rope_attend_and_add(c, o);
  swiglu_ffn(c, o);
}

}  // namespace slake
