// Gemma 2 and Gemma 3: the attention and FFN outputs RMS-normalised again before they join the
// residual stream, and a GeGLU feed-forward (GELU's tanh form); Gemma 3 also RMS-normalises each
// Q and K head (as Qwen3: ModelConfig::qk_norm). The model around the layers scales the
// embeddings by sqrt(dim) (ModelConfig::embed_scale); local layers attend within a sliding window
// with their own RoPE base (ModelConfig::swa_layers: every other layer for Gemma 2, five of every
// six for Gemma 3), and Gemma 2 soft-caps the attention and output logits
// (ModelConfig::attn_softcap, final_softcap), which the backends' attention and output apply. The
// files' norm weights already hold Gemma's (1 + w).
#include "models/models.h"

namespace slake {

void gemma_layer(const ModelConfig& c, LayerOps& o) {
  norm_and_project_qkv(c, o);
  if (c.qk_norm) {
    o.rmsnorm_heads(Act::Q, Weight::QNorm, c.n_heads, c.rms_eps);
    o.rmsnorm_heads(Act::K, Weight::KNorm, c.n_kv_heads, c.rms_eps);
  }
  o.rope(Act::Q, c.n_heads);
  o.rope(Act::K, c.n_kv_heads);
  o.attention(Act::Att, Act::Q, Act::K, Act::V);
  o.matmul(Act::XB, Act::Att, Weight::Wo);
  o.rmsnorm(Act::XB, Act::XB, Weight::AttnPostNorm, c.rms_eps);
  o.add(Act::X, Act::XB);

  o.rmsnorm(Act::XB, Act::X, Weight::FfnNorm, c.rms_eps);
  o.matmul(Act::Gate, Act::XB, Weight::Gate);
  o.matmul(Act::Up, Act::XB, Weight::Up);
  o.geglu(Act::Gate, Act::Up);
  o.matmul(Act::XB, Act::Gate, Weight::Down);
  o.rmsnorm(Act::XB, Act::XB, Weight::FfnPostNorm, c.rms_eps);
  o.add(Act::X, Act::XB);
}

}  // namespace slake
