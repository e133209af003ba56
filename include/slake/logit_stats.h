// Comparing next-token distributions given as logits: log-softmax, negative log-likelihood,
// KL divergence and percentiles, all in double (what slake-perplexity reports).
#pragma once
#include <cstdint>
#include <vector>

namespace slake {

// log softmax(logits)[i], computed stably.
std::vector<double> log_softmax(const float* logits, int n);
// -log p(token) under softmax(logits).
double token_nll(const float* logits, int n, int32_t token);
// KL(P || Q) = sum_i p_i (log p_i - log q_i) with P = softmax(p_logits), Q = softmax(q_logits).
double kl_divergence(const float* p_logits, const float* q_logits, int n);
// Index of the largest logit (the first of equal ones).
int32_t argmax(const float* logits, int n);
// The q-th percentile (q in [0, 100]) with linear interpolation between order statistics
// (numpy's default); values must not be empty.
double percentile(std::vector<double> values, double q);

}  // namespace slake
