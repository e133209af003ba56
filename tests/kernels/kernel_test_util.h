// Helpers of the kernel tests: seeded inputs, device copies, and element-wise comparison with a
// tolerance |got - want| <= abs + rel * |want|.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_memory.h"
#include "kernels.h"
#include "slake/kv_cache.h"

namespace slake::gpu::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

template <typename T>
DeviceBuffer<T> on_device(const std::vector<T>& host) {
  return DeviceBuffer<T>(host);
}

// Sets the stored rows of an f32 head (KvCache's default type) from n x d floats each.
inline void set_f32_rows(KvHead& kh, const std::vector<float>& k, const std::vector<float>& v) {
  ASSERT_EQ(kh.type_k, KvType::F32);
  ASSERT_EQ(kh.type_v, KvType::F32);
  kh.k.resize(k.size() * sizeof(float));
  kh.v.resize(v.size() * sizeof(float));
  std::memcpy(kh.k.data(), k.data(), kh.k.size());
  std::memcpy(kh.v.data(), v.data(), kh.v.size());
}

template <typename A, typename B>
void expect_close(const std::vector<A>& got, const std::vector<B>& want, double abs_tol, double rel_tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (!(std::abs(g - w) <= abs_tol + rel_tol * std::abs(w)) && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements out of tolerance";
}

}  // namespace slake::gpu::test
