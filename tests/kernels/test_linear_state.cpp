// Absorption into the linear state against slake::LinearState: the decode rank-1 update of one
// row per KV head (some heads skipping), and the prefill batch M += K^T V over rows listed by index
// with ragged token counts and head dims not multiples of the 16-wide tile; every cache row type
// the device stores (both sides absorb the stored values). Tolerance: 1e-5 + 1e-5 |cpu|.
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

KvCache cache_with_tokens(int n_kv, int d, int n, uint32_t seed, KvType tk, KvType tv) {
  KvCache cache(1, n_kv, d, n, 0, tk, tv);
  for (int t = 0; t < n; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t), v = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t + 1);
    cache.append(0, k.data(), v.data(), t);
  }
  for (int g = 0; g < n_kv; ++g) cache.head(0, g).lin = LinearState(d);
  return cache;
}

// The CPU's absorption of row r of a head, as stored.
void absorb_row(KvHead& kh, int r, int d) {
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
  kh.lin.absorb(kh.key(r, d, k.data()), kh.value(r, d, v.data()));
}

TEST(KernelLinearState, RankOneAbsorbOfOneRowPerHead) {
  const int n_kv = 3, d = 64, n = 9;
  for (const auto& [tk, tv] : device_row_types(d)) {
    KvCache cache = cache_with_tokens(n_kv, d, n, 20, tk, tv);
    DeviceKvLayer dev(cache, 0, n);
    // Three decode steps; head 1 evicts nothing in the second.
    for (const std::vector<int32_t>& rows : {std::vector<int32_t>{0, 3, 8}, {5, -1, 2}, {5, 7, 7}}) {
      DeviceBuffer<int32_t> drows(rows);
      linear_absorb_one(dev.lin(), dev.view(), drows.get());
      for (int g = 0; g < n_kv; ++g)
        if (rows[static_cast<size_t>(g)] >= 0) absorb_row(cache.head(0, g), rows[static_cast<size_t>(g)], d);
    }
    expect_states_equal(dev, cache, d, "rank-1" + kv_types_label(tk, tv));
  }
}

TEST(KernelLinearState, BatchAbsorbOfGatheredRows) {
  for (const int d : {16, 40, 128})
    for (const auto& [tk, tv] : device_row_types(d)) {
      const int n_kv = 3, n = 70;
      KvCache cache = cache_with_tokens(n_kv, d, n, 30, tk, tv);
      // A state that already holds something, so the kernel must add rather than overwrite.
      for (int g = 0; g < n_kv; ++g) absorb_row(cache.head(0, g), n - 1, d);
      DeviceKvLayer dev(cache, 0, n);
      const std::vector<int32_t> count{70, 0, 33};  // head 1 absorbs nothing; 33: a ragged last chunk
      // Head 0 absorbs its rows in reverse order, head 2 every other row: read through the index.
      std::vector<int32_t> rows(static_cast<size_t>(n_kv) * n, -1);
      for (int t = 0; t < n; ++t) rows[static_cast<size_t>(t)] = n - 1 - t;
      for (int t = 0; t < 33; ++t) rows[static_cast<size_t>(2 * n + t)] = 2 * t;
      DeviceBuffer<int32_t> dcount(count), drows(rows);
      linear_absorb_rows(dev.lin(), dev.view(), drows.get(), n, dcount.get());
      for (int g = 0; g < n_kv; ++g)
        for (int t = 0; t < count[static_cast<size_t>(g)]; ++t) absorb_row(cache.head(0, g), rows[static_cast<size_t>(g * n + t)], d);
      expect_states_equal(dev, cache, d, "batch d=" + std::to_string(d) + kv_types_label(tk, tv));
    }
}

}  // namespace
}  // namespace slake::gpu::test
