// Eviction on the device: per-KV-head top-k flags against slake::top_k_flags (ties to the lower
// index, many ties, -0 and +0, every keep from none to all), and compaction (partition, gather of
// the kept rows' stored bytes, absorption of the evicted rows read in place) against
// KvCache::compact with absorption, for every cache row type the device stores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"
#include "kv_device.h"
#include "slake/kv/kv_scores.h"

namespace slake::gpu::test {
namespace {

TEST(KernelTopk, FlagsMatchTheCpuSelectionIncludingTies) {
  const int heads = 3;
  for (const int n : {1, 6, 255, 256, 700}) {
    const int64_t ld = n + 9;
    std::vector<float> s = random_floats(static_cast<size_t>(heads * ld), 50 + n, -3.0f, 3.0f);
    for (size_t i = 0; i < s.size(); ++i) {
      if (i / static_cast<size_t>(ld) == 1) s[i] = std::round(s[i] * 2.0f) / 2.0f;  // head 1: 13 distinct values, many ties
      if (i / static_cast<size_t>(ld) == 2) s[i] = (i % 3 == 0) ? -0.0f : (i % 3 == 1 ? 0.0f : s[i] * 1e30f);
    }
    DeviceBuffer<float> ds(s);
    DeviceBuffer<uint8_t> flags(static_cast<size_t>(heads * ld));
    for (const int64_t keep : {int64_t{0}, int64_t{1}, int64_t{n / 3}, int64_t{n / 2 + 1}, int64_t{n - 1}, int64_t{n}, int64_t{n + 5}}) {
      topk_flags(flags.get(), ds.get(), heads, n, ld, keep);
      const std::vector<uint8_t> got = flags.download();
      for (int g = 0; g < heads; ++g) {
        const std::vector<char> want = top_k_flags(s.data() + g * ld, n, keep);
        for (int j = 0; j < n; ++j)
          ASSERT_EQ(got[static_cast<size_t>(g * ld + j)], static_cast<uint8_t>(want[static_cast<size_t>(j)]))
              << "n " << n << " keep " << keep << " head " << g << " row " << j;
      }
    }
  }
}

void compact_case(int d, KvType tk, KvType tv) {
  const int n_kv = 3, cap = 300;
  const std::string what = "d=" + std::to_string(d) + kv_types_label(tk, tv);
  const std::vector<int> held{300, 37, 0};
  KvCache cache(1, n_kv, d, cap, 0, tk, tv);
  std::vector<std::vector<char>> keep(n_kv);
  for (int g = 0; g < n_kv; ++g) {
    KvHead& kh = cache.head(0, g);
    const int n = held[static_cast<size_t>(g)];
    const std::vector<float> k = random_floats(static_cast<size_t>(n) * d, 60 + g), v = random_floats(static_cast<size_t>(n) * d, 70 + g);
    set_rows(kh, k, v, d);
    kh.pos.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) kh.pos[static_cast<size_t>(j)] = 5 * j + g;
    kh.n = n;
    kh.lin = LinearState(d);
    const std::vector<float> ke = random_floats(d, 80 + g), ve = random_floats(d, 90 + g);
    if (g == 0) kh.lin.absorb(ke.data(), ve.data());  // a head whose state already holds a token
    const std::vector<float> r = random_floats(static_cast<size_t>(n), 100 + g, 0.0f, 1.0f);
    for (int j = 0; j < n; ++j) keep[static_cast<size_t>(g)].push_back(r[static_cast<size_t>(j)] < (g == 1 ? 0.9f : 0.3f));
  }
  DeviceKvLayer dev(cache, 0, cap);
  std::vector<uint8_t> hflags(static_cast<size_t>(n_kv) * cap, 0);
  for (int g = 0; g < n_kv; ++g)
    for (size_t j = 0; j < keep[static_cast<size_t>(g)].size(); ++j) hflags[static_cast<size_t>(g) * cap + j] = static_cast<uint8_t>(keep[static_cast<size_t>(g)][j]);
  DeviceBuffer<uint8_t> flags(hflags);
  DeviceBuffer<int32_t> kept_idx(static_cast<size_t>(n_kv) * cap), evicted_idx(static_cast<size_t>(n_kv) * cap);
  DeviceBuffer<int32_t> n_kept(n_kv), n_evicted(n_kv);
  partition_rows(kept_idx.get(), n_kept.get(), evicted_idx.get(), n_evicted.get(), flags.get(), cap, dev.n_held.get(), n_kv, cap);
  DeviceBuffer<uint8_t> new_k(static_cast<size_t>(n_kv) * cap * dev.k_row), new_v(static_cast<size_t>(n_kv) * cap * dev.v_row);
  DeviceBuffer<int32_t> new_pos(static_cast<size_t>(n_kv) * cap);
  const KvLayerMut dst{new_k.get(), new_v.get(), new_pos.get(), n_kv, cap, d, dev.type_k, dev.type_v};
  gather_rows(dst, dev.view(), kept_idx.get(), cap, n_kept.get(), cap);
  linear_absorb_rows(dev.lin(), dev.view(), evicted_idx.get(), cap, n_evicted.get());

  for (int g = 0; g < n_kv; ++g) cache.compact(0, g, keep[static_cast<size_t>(g)], true);
  const std::vector<int32_t> got_n = n_kept.download(), got_pos = new_pos.download();
  const std::vector<uint8_t> got_k = new_k.download(), got_v = new_v.download();
  for (int g = 0; g < n_kv; ++g) {
    const KvHead& kh = cache.head(0, g);
    ASSERT_EQ(got_n[static_cast<size_t>(g)], kh.n) << what << " head " << g;
    for (int j = 0; j < kh.n; ++j)
      ASSERT_EQ(got_pos[static_cast<size_t>(g) * cap + j], kh.pos[static_cast<size_t>(j)]) << what << " head " << g << " row " << j;
    // The kept rows' stored bytes, exactly.
    const size_t k0 = static_cast<size_t>(g) * cap * kh.k_row, v0 = static_cast<size_t>(g) * cap * kh.v_row;
    ASSERT_TRUE(std::equal(kh.k.begin(), kh.k.begin() + static_cast<long>(kh.n * kh.k_row), got_k.begin() + static_cast<long>(k0)))
        << what << " keys of head " << g;
    ASSERT_TRUE(std::equal(kh.v.begin(), kh.v.begin() + static_cast<long>(kh.n * kh.v_row), got_v.begin() + static_cast<long>(v0)))
        << what << " values of head " << g;
    EXPECT_EQ(n_evicted.download()[static_cast<size_t>(g)], held[static_cast<size_t>(g)] - kh.n) << what;
  }
  // The CPU absorbs token by token, the kernel as one K^T V: equal up to fp32 summation order.
  std::vector<float> want_n, want_ks, want_vs, want_m;
  for (int g = 0; g < n_kv; ++g) {
    const LinearState& l = cache.head(0, g).lin;
    want_n.push_back(l.n);
    for (int i = 0; i < d; ++i) want_ks.push_back(l.M.empty() ? 0.0f : l.ksum[static_cast<size_t>(i)]);
    for (int i = 0; i < d; ++i) want_vs.push_back(l.M.empty() ? 0.0f : l.vsum[static_cast<size_t>(i)]);
    for (int i = 0; i < d * d; ++i) want_m.push_back(l.M.empty() ? 0.0f : l.M[static_cast<size_t>(i)]);
  }
  expect_close(dev.lin_n.download(), want_n, 0, 0, what + " n");
  expect_close(dev.ksum.download(), want_ks, 1e-5, 1e-5, what + " ksum");
  expect_close(dev.vsum.download(), want_vs, 1e-5, 1e-5, what + " vsum");
  expect_close(dev.M.download(), want_m, 1e-5, 1e-5, what + " M");
}

TEST(KernelCompact, KeptRowsGatheredAndEvictedRowsAbsorbedLikeTheCpuCache) {
  for (const int d : {24, 64})
    for (const auto& [tk, tv] : device_row_types(d)) compact_case(d, tk, tv);
}

}  // namespace
}  // namespace slake::gpu::test
