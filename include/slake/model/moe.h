// The router of a mixture-of-experts feed-forward (Mixtral, Qwen3-MoE), stated once for every
// backend: a softmax over the router's logits, the n_used most probable experts, and their
// probabilities as the weights of their outputs, renormalised to sum 1 when the model says so
// (llama.cpp's build_moe_ffn with softmax gating; transformers' MixtralSparseMoeBlock and
// Qwen3MoeSparseMoeBlock).
#pragma once
#include <cmath>

namespace slake {

struct ExpertChoice {
  int expert;
  float weight;
};

// out[0..n_used): the chosen experts by descending probability (the lower index first on ties).
void moe_route(const float* logits, int n_expert, int n_used, bool renormalise, ExpertChoice* out);

// The weight of a shared expert's output (Qwen2-MoE): the sigmoid of its gate's logit.
inline float shared_expert_weight(float gate_logit) { return 1.0f / (1.0f + std::exp(-gate_logit)); }

}  // namespace slake
