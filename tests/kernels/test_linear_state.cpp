// Absorption into the linear state against slake::LinearState: the decode rank-1 update of one
// row per KV head (some heads skipping), and the prefill batch M += K^T V with ragged token
// counts and head dims not multiples of the 16-wide tile. Tolerance: 1e-5 + 1e-5 |cpu|.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kv_device.h"

namespace slake::gpu::test {
namespace {

std::vector<float> packed(const KvCache& cache, int which, int d) {  // 0 n, 1 ksum, 2 vsum, 3 M
  std::vector<float> out;
  for (int g = 0; g < cache.n_kv_heads(); ++g) {
    const LinearState& l = cache.head(0, g).lin;
    const size_t size = which == 0 ? 1 : which == 3 ? static_cast<size_t>(d) * d : static_cast<size_t>(d);
    if (which == 0) out.push_back(l.n);
    else if (l.M.empty()) out.insert(out.end(), size, 0.0f);
    else {
      const std::vector<float>& src = which == 1 ? l.ksum : which == 2 ? l.vsum : l.M;
      out.insert(out.end(), src.begin(), src.end());
    }
  }
  return out;
}

void expect_states_equal(const DeviceKvLayer& dev, const KvCache& cache, int d, const std::string& what) {
  expect_close(dev.lin_n.download(), packed(cache, 0, d), 0, 0, what + " n");
  expect_close(dev.ksum.download(), packed(cache, 1, d), 1e-5, 1e-5, what + " ksum");
  expect_close(dev.vsum.download(), packed(cache, 2, d), 1e-5, 1e-5, what + " vsum");
  expect_close(dev.M.download(), packed(cache, 3, d), 1e-5, 1e-5, what + " M");
}

KvCache cache_with_tokens(int n_kv, int d, int n, uint32_t seed) {
  KvCache cache(1, n_kv, d, n);
  for (int t = 0; t < n; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t), v = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t + 1);
    cache.append(0, k.data(), v.data(), t);
  }
  for (int g = 0; g < n_kv; ++g) cache.head(0, g).lin = LinearState(d);
  return cache;
}

TEST(KernelLinearState, RankOneAbsorbOfOneRowPerHead) {
  const int n_kv = 3, d = 40, n = 9;
  KvCache cache = cache_with_tokens(n_kv, d, n, 20);
  DeviceKvLayer dev(cache, 0, n);
  // Three decode steps; head 1 evicts nothing in the second.
  for (const std::vector<int32_t>& rows : {std::vector<int32_t>{0, 3, 8}, {5, -1, 2}, {5, 7, 7}}) {
    DeviceBuffer<int32_t> drows(rows);
    linear_absorb_one(dev.lin(), dev.view(), drows.get());
    for (int g = 0; g < n_kv; ++g) {
      KvHead& kh = cache.head(0, g);
      if (rows[static_cast<size_t>(g)] >= 0) kh.lin.absorb(kh.key(rows[static_cast<size_t>(g)], d), kh.value(rows[static_cast<size_t>(g)], d));
    }
  }
  expect_states_equal(dev, cache, d, "rank-1");
}

TEST(KernelLinearState, BatchAbsorbOfGatheredRows) {
  for (const int d : {16, 40, 128}) {
    const int n_kv = 3, n = 70;
    KvCache cache = cache_with_tokens(n_kv, d, n, 30);
    // A state that already holds something, so the kernel must add rather than overwrite.
    for (int g = 0; g < n_kv; ++g) cache.head(0, g).lin.absorb(cache.head(0, g).key(n - 1, d), cache.head(0, g).value(n - 1, d));
    DeviceKvLayer dev(cache, 0, n);
    const std::vector<int32_t> count{70, 0, 33};  // head 1 absorbs nothing; 33: a ragged last chunk
    DeviceBuffer<int32_t> dcount(count);
    linear_absorb_rows(dev.lin(), dev.k.get(), dev.v.get(), dcount.get(), n_kv, d, static_cast<int64_t>(n) * d);
    for (int g = 0; g < n_kv; ++g) {
      KvHead& kh = cache.head(0, g);
      if (count[static_cast<size_t>(g)] > 0) kh.lin.absorb_batch(kh.key(0, d), kh.value(0, d), count[static_cast<size_t>(g)], static_cast<size_t>(d));
    }
    expect_states_equal(dev, cache, d, "batch d=" + std::to_string(d));
  }
}

}  // namespace
}  // namespace slake::gpu::test
