#include "slake/kv/linear_cache.h"

#include <algorithm>
#include <limits>

namespace slake {

void LinearState::allocate() {
  if (centroids > 0) {
    if (cn.empty()) {
      cn.assign(static_cast<size_t>(centroids), 0.0f);
      ck.assign(static_cast<size_t>(centroids) * head_dim, 0.0f);
      cv.assign(static_cast<size_t>(centroids) * head_dim, 0.0f);
    }
    return;
  }
  if (!M.empty()) return;
  ksum.assign(static_cast<size_t>(head_dim), 0.0f);
  vsum.assign(static_cast<size_t>(head_dim), 0.0f);
  M.assign(static_cast<size_t>(head_dim) * head_dim, 0.0f);
}

// The first empty centroid, else the one whose mean key is nearest to k (the lowest index on ties).
void LinearState::absorb_centroid(const float* k, const float* v) {
  const size_t d = static_cast<size_t>(head_dim);
  size_t best = 0;
  float best_dist = std::numeric_limits<float>::infinity();
  for (size_t c = 0; c < cn.size(); ++c) {
    if (cn[c] == 0.0f) {
      best = c;
      break;
    }
    const float inv = 1.0f / cn[c];
    float dist = 0.0f;
    for (size_t i = 0; i < d; ++i) {
      const float x = ck[c * d + i] * inv - k[i];
      dist += x * x;
    }
    if (dist < best_dist) best_dist = dist, best = c;
  }
  cn[best] += 1.0f;
  for (size_t i = 0; i < d; ++i) ck[best * d + i] += k[i], cv[best * d + i] += v[i];
}

void LinearState::absorb(const float* k, const float* v) {
  allocate();
  const int d = head_dim;
  if (centroids > 0) {
    n += 1.0f;
    absorb_centroid(k, v);
    return;
  }
  n += 1.0f;
  for (int i = 0; i < d; ++i) {
    ksum[static_cast<size_t>(i)] += k[i];
    vsum[static_cast<size_t>(i)] += v[i];
    float* row = M.data() + static_cast<size_t>(i) * d;
    const float ki = k[i];
    for (int j = 0; j < d; ++j) row[j] += ki * v[j];
  }
}

void LinearState::absorb_batch(const float* k, const float* v, int count, size_t stride) {
  // M += K^T V as a blocked product: rows of M stay in cache while the tokens stream by.
  allocate();
  const int d = head_dim;
  n += static_cast<float>(count);
  if (centroids > 0) {
    for (int t = 0; t < count; ++t) absorb_centroid(k + t * stride, v + t * stride);
    return;
  }
  for (int t = 0; t < count; ++t)
    for (int i = 0; i < d; ++i) {
      ksum[static_cast<size_t>(i)] += k[t * stride + static_cast<size_t>(i)];
      vsum[static_cast<size_t>(i)] += v[t * stride + static_cast<size_t>(i)];
    }
  for (int i = 0; i < d; ++i) {
    float* row = M.data() + static_cast<size_t>(i) * d;
    for (int t = 0; t < count; ++t) {
      const float ki = k[t * stride + static_cast<size_t>(i)];
      const float* vt = v + t * stride;
      for (int j = 0; j < d; ++j) row[j] += ki * vt[j];
    }
  }
}

void LinearState::clear() {
  n = 0.0f;
  std::fill(ksum.begin(), ksum.end(), 0.0f);
  std::fill(vsum.begin(), vsum.end(), 0.0f);
  std::fill(M.begin(), M.end(), 0.0f);
  std::fill(cn.begin(), cn.end(), 0.0f);
  std::fill(ck.begin(), ck.end(), 0.0f);
  std::fill(cv.begin(), cv.end(), 0.0f);
}

}  // namespace slake
