#include "slake/logit_stats.h"

#include <algorithm>
#include <cmath>

#include "slake/error.h"

namespace slake {

std::vector<double> log_softmax(const float* logits, int n) {
  const double m = *std::max_element(logits, logits + n);
  double z = 0;
  for (int i = 0; i < n; ++i) z += std::exp(logits[i] - m);
  const double lz = m + std::log(z);
  std::vector<double> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = logits[i] - lz;
  return out;
}

double token_nll(const float* logits, int n, int32_t token) {
  if (token < 0 || token >= n) fail("token " + std::to_string(token) + " is outside the logits");
  return -log_softmax(logits, n)[static_cast<size_t>(token)];
}

double kl_divergence(const float* p_logits, const float* q_logits, int n) {
  const std::vector<double> lp = log_softmax(p_logits, n), lq = log_softmax(q_logits, n);
  double kl = 0;
  for (int i = 0; i < n; ++i) kl += std::exp(lp[static_cast<size_t>(i)]) * (lp[static_cast<size_t>(i)] - lq[static_cast<size_t>(i)]);
  return std::max(0.0, kl);  // rounding can leave a tiny negative for identical distributions
}

int32_t argmax(const float* logits, int n) { return static_cast<int32_t>(std::max_element(logits, logits + n) - logits); }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) fail("percentile of no values");
  std::sort(v.begin(), v.end());
  const double rank = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (rank - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace slake
