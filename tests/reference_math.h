// Float64 brute-force references for attention tests: nothing here shares code with the engine.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "slake/kv/kv_cache.h"

namespace slake::test {

inline double dot64(const float* a, const float* b, int d) {
  double s = 0;
  for (int i = 0; i < d; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline bool visible(int32_t p, int32_t qpos, int window) { return p <= qpos && (window <= 0 || p > qpos - window); }

// softmax over the first n_rows keys of `kv` of q.k_j / sqrt(d) (all assumed visible); the keys
// as their stored type dequantises them.
// The soft-cap of a logit: cap tanh(x / cap), x itself for cap 0.
inline double capped64(double x, double cap) { return cap > 0 ? cap * std::tanh(x / cap) : x; }

inline std::vector<double> attention_probs64(const float* q, const KvHead& kv, int d, int n_rows, double cap = 0.0) {
  std::vector<double> x;
  std::vector<float> row(static_cast<size_t>(d));
  for (int j = 0; j < n_rows; ++j) x.push_back(capped64(dot64(q, kv.key(j, d, row.data()), d) / std::sqrt(static_cast<double>(d)), cap));
  const double m = *std::max_element(x.begin(), x.end());
  double z = 0;
  for (double& e : x) z += (e = std::exp(e - m));
  for (double& e : x) e /= z;
  return x;
}

// softmax(q.k_j / sqrt(d)) v_j over the keys of `kv` visible from qpos.
inline std::vector<double> softmax_attention(const float* q, int32_t qpos, const KvHead& kv, int d, int window,
                                             double cap = 0.0) {
  std::vector<double> x;
  std::vector<int> idx;
  for (int j = 0; j < kv.n; ++j) {
    if (!visible(kv.pos[static_cast<size_t>(j)], qpos, window)) continue;
    x.push_back(capped64(dot64(q, kv.key(j, d), d) / std::sqrt(static_cast<double>(d)), cap));
    idx.push_back(j);
  }
  std::vector<double> out(static_cast<size_t>(d), 0.0);
  if (x.empty()) return out;
  const double m = *std::max_element(x.begin(), x.end());
  double z = 0;
  for (double& v : x) z += (v = std::exp(v - m));
  for (size_t c = 0; c < x.size(); ++c)
    for (int i = 0; i < d; ++i) out[static_cast<size_t>(i)] += x[c] / z * kv.value(idx[c], d)[i];
  return out;
}

// The Taylor formula of SLAKE evaluated token by token: exact exp for the retained keys,
// exp(mu) (1 + x_j - mu) for each evicted key (k_e, v_e rows), mu = mean of the evicted scores.
// Everything is shifted by the largest exponent so large scores do not overflow.
// With soft-capped logits (cap > 0, f(x) = cap tanh(x / cap)): exp(f(x)) for the retained keys and
// exp(f(x̄)) (1 + f'(x̄) (x_j - x̄)) for the evicted ones, x̄ their mean raw score.
inline std::vector<double> taylor_attention(const float* q, int32_t qpos, const KvHead& kv,
                                            const std::vector<std::vector<float>>& k_e,
                                            const std::vector<std::vector<float>>& v_e, int d, double cap = 0.0) {
  const double sd = std::sqrt(static_cast<double>(d));
  std::vector<double> xr, xe;
  std::vector<int> idx;
  for (int j = 0; j < kv.n; ++j)
    if (visible(kv.pos[static_cast<size_t>(j)], qpos, 0)) {
      xr.push_back(capped64(dot64(q, kv.key(j, d), d) / sd, cap));
      idx.push_back(j);
    }
  double xbar = 0;
  for (const auto& k : k_e) xe.push_back(dot64(q, k.data(), d) / sd), xbar += xe.back();
  if (!xe.empty()) xbar /= static_cast<double>(xe.size());
  const double mu = capped64(xbar, cap), th = cap > 0 ? std::tanh(xbar / cap) : 0.0, slope = 1.0 - th * th;
  double shift = xe.empty() ? -INFINITY : mu;
  for (double x : xr) shift = std::max(shift, x);
  std::vector<double> num(static_cast<size_t>(d), 0.0);
  double den = 0;
  for (size_t c = 0; c < xr.size(); ++c) {
    const double w = std::exp(xr[c] - shift);
    den += w;
    for (int i = 0; i < d; ++i) num[static_cast<size_t>(i)] += w * kv.value(idx[c], d)[i];
  }
  for (size_t c = 0; c < xe.size(); ++c) {
    const double w = std::exp(mu - shift) * (1.0 + slope * (xe[c] - xbar));
    den += w;
    for (int i = 0; i < d; ++i) num[static_cast<size_t>(i)] += w * v_e[c][static_cast<size_t>(i)];
  }
  for (double& v : num) v /= den;
  return num;
}

}  // namespace slake::test
