// Llama (and Mistral, whose sliding window the attention operation honours): pre-norm attention
// with RoPE and grouped KV heads, then a SwiGLU feed-forward, each added to the residual stream.
#include "models/models.h"

namespace slake {

void llama_layer(const ModelConfig& c, LayerOps& o) {
  o.rmsnorm(Act::XB, Act::X, Weight::AttnNorm, c.rms_eps);
  o.matmul(Act::Q, Act::XB, Weight::Wq);
  o.matmul(Act::K, Act::XB, Weight::Wk);
  o.matmul(Act::V, Act::XB, Weight::Wv);
  o.rope(Act::Q, c.n_heads);
  o.rope(Act::K, c.n_kv_heads);
  o.attention(Act::Att, Act::Q, Act::K, Act::V);
  o.matmul(Act::XB, Act::Att, Weight::Wo);
  o.add(Act::X, Act::XB);

  o.rmsnorm(Act::XB, Act::X, Weight::FfnNorm, c.rms_eps);
  o.matmul(Act::Gate, Act::XB, Weight::Gate);
  o.matmul(Act::Up, Act::XB, Weight::Up);
  o.swiglu(Act::Gate, Act::Up);
  o.matmul(Act::XB, Act::Gate, Weight::Down);
  o.add(Act::X, Act::XB);
}

}  // namespace slake
