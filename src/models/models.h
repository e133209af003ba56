// The layer definitions, one per architecture (one file each in this folder), and the table that
// maps a model's general.architecture to its definition (models.cpp).
#pragma once
#include "slake/model/layer.h"

namespace slake {

void llama_layer(const ModelConfig& c, LayerOps& ops);
void qwen2_layer(const ModelConfig& c, LayerOps& ops);
void qwen3_layer(const ModelConfig& c, LayerOps& ops);
void gemma_layer(const ModelConfig& c, LayerOps& ops);  // gemma2, gemma3

// The blocks the pre-norm families share.
// XB = attn_norm(X); Q, K, V = its projections.
inline void norm_and_project_qkv(const ModelConfig& c, LayerOps& o) {
  o.rmsnorm(Act::XB, Act::X, Weight::AttnNorm, c.rms_eps);
  o.matmul(Act::Q, Act::XB, Weight::Wq);
  o.matmul(Act::K, Act::XB, Weight::Wk);
  o.matmul(Act::V, Act::XB, Weight::Wv);
}
// RoPE on Q and K, the KV hooks and attention, the output projection added to X.
inline void rope_attend_and_add(const ModelConfig& c, LayerOps& o) {
  o.rope(Act::Q, c.n_heads);
  o.rope(Act::K, c.n_kv_heads);
  o.attention(Act::Att, Act::Q, Act::K, Act::V);
  o.matmul(Act::XB, Act::Att, Weight::Wo);
  o.add(Act::X, Act::XB);
}
// X += down(silu(gate(ffn_norm(X))) * up(ffn_norm(X))), or with experts (ModelConfig::n_expert)
// the mixture of such feed-forwards that the router picks for each row.
inline void swiglu_ffn(const ModelConfig& c, LayerOps& o) {
  o.rmsnorm(Act::XB, Act::X, Weight::FfnNorm, c.rms_eps);
  if (c.n_expert > 0) {
    o.moe_ffn(Act::X, Act::XB);
    return;
  }
  o.matmul(Act::Gate, Act::XB, Weight::Gate);
  o.matmul(Act::Up, Act::XB, Weight::Up);
  o.swiglu(Act::Gate, Act::Up);
  o.matmul(Act::XB, Act::Gate, Weight::Down);
  o.add(Act::X, Act::XB);
}

}  // namespace slake
