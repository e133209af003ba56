#include "slake/linear_cache.h"

#include <algorithm>

namespace slake {

void LinearState::allocate() {
  if (!M.empty()) return;
  ksum.assign(static_cast<size_t>(head_dim), 0.0f);
  vsum.assign(static_cast<size_t>(head_dim), 0.0f);
  M.assign(static_cast<size_t>(head_dim) * head_dim, 0.0f);
}

void LinearState::absorb(const float* k, const float* v) {
  allocate();
  const int d = head_dim;
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
}

}  // namespace slake
