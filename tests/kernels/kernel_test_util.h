// Helpers of the kernel tests: seeded inputs, device copies, and element-wise comparison with a
// tolerance |got - want| <= abs + rel * |want|.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_memory.h"
#include "kernels.h"
#include "slake/kv/kv_cache.h"

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

// Sets the stored rows of a head (a row type: not KIVI) from n x d floats each, stored as the
// head's types by slake::kv_store_row.
inline void set_rows(KvHead& kh, const std::vector<float>& k, const std::vector<float>& v, int d) {
  const size_t n = k.size() / static_cast<size_t>(d);
  kh.k.resize(n * kh.k_row);
  kh.v.resize(n * kh.v_row);
  for (size_t j = 0; j < n; ++j) {
    kv_store_row(kh.type_k, k.data() + j * d, kh.k.data() + j * kh.k_row, d);
    kv_store_row(kh.type_v, v.data() + j * d, kh.v.data() + j * kh.v_row, d);
  }
}

// The (key, value) row types a kernel test runs over for head dimension d: each type the device
// stores (kernels.h ElemType) for both, and q8_0 keys with f16 values; q8_0 only when d is a
// multiple of its 32-value blocks.
inline std::vector<std::pair<KvType, KvType>> device_row_types(int d) {
  std::vector<std::pair<KvType, KvType>> t{{KvType::F32, KvType::F32}, {KvType::F16, KvType::F16}, {KvType::BF16, KvType::BF16}};
  if (d % 32 == 0) t.insert(t.end(), {{KvType::Q8_0, KvType::Q8_0}, {KvType::Q8_0, KvType::F16}});
  return t;
}
inline std::string kv_types_label(KvType k, KvType v) { return std::string(" ctk=") + kv_type_name(k) + " ctv=" + kv_type_name(v); }

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
