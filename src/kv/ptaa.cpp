#include "slake/kv/ptaa.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "slake/kv/attention.h"
#include "slake/cpu/ops.h"
#include "slake/model/softcap.h"

namespace slake {

namespace {

// The centroid state: K more tokens, each of weight cn[c] at the mean key ck[c] / cn[c], with the
// value sum cv[c], merged into the retained keys' online softmax (m, l, acc).
void centroid_finish(float* out, const float* q, float m, float l, const float* acc, const LinearState& lin, int d, float softcap) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t K = lin.cn.size();
  thread_local std::vector<float> x;
  x.assign(K, -std::numeric_limits<float>::infinity());
  float m_all = m;
  for (size_t c = 0; c < K; ++c) {
    if (lin.cn[c] == 0.0f) continue;
    x[c] = soft_cap(dot_f32(q, lin.ck.data() + c * static_cast<size_t>(d), d) * scale / lin.cn[c], softcap);
    m_all = std::max(m_all, x[c]);
  }
  if (m_all == -std::numeric_limits<float>::infinity()) {  // nothing visible, nothing evicted
    std::fill(out, out + d, 0.0f);
    return;
  }
  const float e = std::exp(m - m_all);
  for (int i = 0; i < d; ++i) out[i] = e * acc[i];
  float den = e * l;
  for (size_t c = 0; c < K; ++c) {
    if (lin.cn[c] == 0.0f) continue;
    const float w = std::exp(x[c] - m_all);
    axpy_f32(w, lin.cv.data() + c * static_cast<size_t>(d), out, d);
    den += w * lin.cn[c];
  }
  const float inv = 1.0f / den;
  for (int i = 0; i < d; ++i) out[i] *= inv;
}

}  // namespace

void ptaa_finish(float* out, const float* q, float m, float l, const float* acc, const LinearState& lin, int d, float softcap,
                 const RecallCover* cover) {
  if (lin.centroids > 0 && lin.n > 0.0f) return centroid_finish(out, q, m, l, acc, lin, d, softcap);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // The tokens the Taylor state stands for: every evicted one, less those recalled exactly. Half a
  // token or less left is rounding of the subtraction: nothing.
  const float n_rest = lin.n - (cover ? cover->n : 0.0f);
  const bool taylor = lin.n > 0.0f && n_rest > 0.5f;
  // x̄: the mean raw logit of the tokens the state stands for; mu = f(x̄), g = f'(x̄).
  const float xbar = taylor ? (dot_f32(q, lin.ksum.data(), d) * scale - (cover ? cover->sx : 0.0f)) / n_rest : 0.0f;
  const float mu = taylor ? soft_cap(xbar, softcap) : -std::numeric_limits<float>::infinity();
  const float g = soft_cap_slope(xbar, softcap);
  const float m_all = std::max(m, mu);
  if (m_all == -std::numeric_limits<float>::infinity()) {  // nothing visible, nothing evicted
    std::fill(out, out + d, 0.0f);
    return;
  }
  const float e = std::exp(m - m_all);  // 0 when no retained key is visible
  for (int i = 0; i < d; ++i) out[i] = e * acc[i];
  float den = e * l;
  if (taylor) {
    // num += lam * ((1 - g x̄) vsum + g q^T M / sqrt(d));  den += lam * n, each less the recalled part.
    const float lam = std::exp(mu - m_all);
    const float a = lam * (1.0f - g * xbar), b = lam * g;
    for (int i = 0; i < d; ++i) out[i] += a * lin.vsum[static_cast<size_t>(i)];
    for (int i = 0; i < d; ++i) axpy_f32(b * q[i] * scale, lin.M.data() + static_cast<size_t>(i) * d, out, d);
    if (cover && cover->n > 0.0f) {
      axpy_f32(-a, cover->vs, out, d);
      axpy_f32(-b, cover->xv, out, d);
    }
    den += lam * n_rest;
  }
  const float inv = 1.0f / den;
  for (int i = 0; i < d; ++i) out[i] *= inv;
}

void ptaa_one(float* out, const float* q, int32_t qpos, const KvHead& kv, const LinearState& lin, int d, int window, float softcap) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  thread_local std::vector<float> x, acc, row;
  x.resize(static_cast<size_t>(kv.n));
  row.resize(static_cast<size_t>(d));
  acc.assign(static_cast<size_t>(d), 0.0f);
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < kv.n; ++j) {
    x[static_cast<size_t>(j)] = key_visible(kv.pos[static_cast<size_t>(j)], qpos, window)
                                    ? soft_cap(dot_f32(q, kv.key(j, d, row.data()), d) * scale, softcap)
                                    : -std::numeric_limits<float>::infinity();
    m = std::max(m, x[static_cast<size_t>(j)]);
  }
  float l = 0.0f;
  if (m != -std::numeric_limits<float>::infinity())
    for (int j = 0; j < kv.n; ++j) {
      const float xj = x[static_cast<size_t>(j)];
      if (xj == -std::numeric_limits<float>::infinity()) continue;
      const float p = std::exp(xj - m);
      l += p;
      axpy_f32(p, kv.value(j, d, row.data()), acc.data(), d);
    }
  ptaa_finish(out, q, m, l, acc.data(), lin, d, softcap);
}

}  // namespace slake
