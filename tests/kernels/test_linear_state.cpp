// Absorption into the linear state against slake::LinearState: the decode rank-1 update of one
// row per KV head (some heads skipping), and the prefill batch M += K^T V over rows listed by index
// with ragged token counts and head dims not multiples of the 16-wide tile; every cache row type
// the device stores (both sides absorb the stored values). Tolerance: 1e-5 + 1e-5 |cpu|. The
// centroid states the same way: counts exactly (every row joins the same centroid as on the CPU),
// key and value sums within the same tolerance.
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

KvCache cache_with_tokens(int n_kv, int d, int n, uint32_t seed, KvType tk, KvType tv, int centroids = 0) {
  KvCache cache(1, n_kv, d, n, 0, tk, tv);
  for (int t = 0; t < n; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t), v = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t + 1);
    cache.append(0, k.data(), v.data(), t);
  }
  for (int g = 0; g < n_kv; ++g) cache.head(0, g).lin = LinearState(d, centroids);
  return cache;
}

// The CPU's absorption of row r of a head, as stored.
void absorb_row(KvHead& kh, int r, int d) {
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
  kh.lin.absorb(kh.key(r, d, k.data()), kh.value(r, d, v.data()));
}

// The evicted rows of three heads of an n-row cache (n >= 66), as partition_rows lists them: head 0
// all n in reverse order, head 1 none, head 2 every other row of the first 66 (33: a ragged last
// chunk), read through the index.
struct Evicted {
  std::vector<int32_t> count, rows;  // rows: [3][n]
};
Evicted evicted_rows(int n) {
  Evicted e{{n, 0, 33}, std::vector<int32_t>(static_cast<size_t>(3) * n, -1)};
  for (int t = 0; t < n; ++t) e.rows[static_cast<size_t>(t)] = n - 1 - t;
  for (int t = 0; t < 33; ++t) e.rows[static_cast<size_t>(2 * n + t)] = 2 * t;
  return e;
}
void absorb_on_cpu(KvCache& cache, const Evicted& e, int n, int d) {
  for (int g = 0; g < 3; ++g)
    for (int t = 0; t < e.count[static_cast<size_t>(g)]; ++t) absorb_row(cache.head(0, g), e.rows[static_cast<size_t>(g * n + t)], d);
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
      const Evicted e = evicted_rows(n);
      DeviceBuffer<int32_t> dcount(e.count), drows(e.rows);
      linear_absorb_rows(dev.lin(), dev.view(), drows.get(), n, dcount.get());
      absorb_on_cpu(cache, e, n, d);
      expect_states_equal(dev, cache, d, "batch d=" + std::to_string(d) + kv_types_label(tk, tv));
    }
}

void expect_centroids_equal(const DeviceKvLayer& dev, const KvCache& cache, const std::string& what) {
  std::vector<float> n, cn, ck, cv;
  for (int g = 0; g < cache.n_kv_heads(); ++g) {
    const LinearState& l = cache.head(0, g).lin;
    const size_t K = static_cast<size_t>(l.centroids), d = static_cast<size_t>(l.head_dim);
    n.push_back(l.n);
    if (l.cn.empty()) {  // never absorbed anything: zeros on the device
      cn.insert(cn.end(), K, 0.0f), ck.insert(ck.end(), K * d, 0.0f), cv.insert(cv.end(), K * d, 0.0f);
      continue;
    }
    cn.insert(cn.end(), l.cn.begin(), l.cn.end());
    ck.insert(ck.end(), l.ck.begin(), l.ck.end());
    cv.insert(cv.end(), l.cv.begin(), l.cv.end());
  }
  expect_close(dev.lin_n.download(), n, 0, 0, what + " n");
  expect_close(dev.cn.download(), cn, 0, 0, what + " tokens per centroid");
  expect_close(dev.ck.download(), ck, 1e-5, 1e-5, what + " key sums");
  expect_close(dev.cv.download(), cv, 1e-5, 1e-5, what + " value sums");
}

TEST(KernelCentroids, OneRowPerHead) {
  const int n_kv = 3, d = 40, n = 12, K = 4;
  for (const auto& [tk, tv] : device_row_types(d)) {
    KvCache cache = cache_with_tokens(n_kv, d, n, 50, tk, tv, K);
    // A head that has absorbed rows already, so the device starts from a seeded state.
    for (int r : {1, 2}) absorb_row(cache.head(0, 0), r, d);
    DeviceKvLayer dev(cache, 0, n);
    // Seven decode steps: the first four seed head 1 and 2's centroids, the rest join the nearest;
    // head 1 evicts nothing in the third.
    const std::vector<std::vector<int32_t>> steps{{0, 3, 8}, {5, 4, 2}, {6, -1, 1}, {7, 7, 7}, {9, 9, 9}, {10, 11, 0}, {11, 0, 3}};
    for (const std::vector<int32_t>& rows : steps) {
      DeviceBuffer<int32_t> drows(rows);
      centroid_absorb_one(dev.lin(), dev.view(), drows.get());
      for (int g = 0; g < n_kv; ++g)
        if (rows[static_cast<size_t>(g)] >= 0) absorb_row(cache.head(0, g), rows[static_cast<size_t>(g)], d);
    }
    expect_centroids_equal(dev, cache, "one row" + kv_types_label(tk, tv));
  }
}

TEST(KernelCentroids, RowsInTheirEvictionOrder) {
  // K = 6: more rows than centroids; K = 200: more centroids than threads and rows (some stay
  // unseeded, and the first unseeded lies beyond the first thread's stride).
  for (const int K : {6, 200})
    for (const auto& [tk, tv] : device_row_types(64)) {
      const int n_kv = 3, n = 70, d = 64;
      KvCache cache = cache_with_tokens(n_kv, d, n, 60, tk, tv, K);
      for (int r = 0; r < 150 && r < K + 5; ++r) absorb_row(cache.head(0, 2), r % n, d);  // head 2 starts seeded
      DeviceKvLayer dev(cache, 0, n);
      const Evicted e = evicted_rows(n);
      DeviceBuffer<int32_t> dcount(e.count), drows(e.rows);
      centroid_absorb_rows(dev.lin(), dev.view(), drows.get(), n, dcount.get());
      absorb_on_cpu(cache, e, n, d);
      expect_centroids_equal(dev, cache, "K=" + std::to_string(K) + kv_types_label(tk, tv));
    }
}

}  // namespace
}  // namespace slake::gpu::test
