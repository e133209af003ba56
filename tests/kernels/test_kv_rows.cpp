// The device's stored KV rows against the CPU cache, byte for byte, for every row type the device
// stores: kv_append quantises as slake::kv_store_row (f16 and bf16 round to nearest even, ties
// and subnormals included; q8_0's scale and round-half-away), and remove_rows moves the stored
// bytes as KvCache::compact does when a decode step evicts one row per head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "kv_device.h"

namespace slake::gpu::test {
namespace {

// Values that stress the conversions: ties between two f16 / bf16 neighbours, f16 subnormals and
// the values under them, f16 overflow, exact q8_0 halves, an all-zero q8_0 block, infinities aside.
std::vector<float> hard_values(size_t n, uint32_t seed) {
  std::vector<float> x = random_floats(n, seed, -3.0f, 3.0f);
  const float special[] = {0.0f,        -0.0f,     1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256,
                           6.0e-8f,     3.0e-8f,   2.9802322e-8f,      1.0e-5f,            -6.1e-5f,
                           65519.0f,    65520.0f,  70000.0f,           -1.0e30f,           0.5f,
                           -2.5f,       127.0f,    -63.5f,             1.0e-38f,           std::numeric_limits<float>::min()};
  for (size_t i = 0; i < n && i < 2 * std::size(special); i += 2) x[i] = special[i / 2];
  for (size_t i = 64; i < 96 && i < n; ++i) x[i] = 0.0f;  // a whole zero block (scale 0)
  return x;
}

void append_case(int d, KvType tk, KvType tv) {
  const int n_kv = 2, n_tok = 5, cap = 8, row0 = 2;
  const std::string what = "d=" + std::to_string(d) + kv_types_label(tk, tv);
  const int64_t stride = static_cast<int64_t>(n_kv) * d + 4;  // tokens' rows with padding
  const std::vector<float> k = hard_values(static_cast<size_t>(n_tok * stride), 1), v = hard_values(static_cast<size_t>(n_tok * stride), 2);
  std::vector<int32_t> pos(n_tok);
  for (int t = 0; t < n_tok; ++t) pos[static_cast<size_t>(t)] = 40 + 3 * t;
  KvCache empty(1, n_kv, d, cap, 0, tk, tv);
  DeviceKvLayer dev(empty, 0, cap);
  DeviceBuffer<float> dk(k), dv(v);
  DeviceBuffer<int32_t> dpos(pos);
  kv_append(dev.mut(), row0, dk.get(), dv.get(), stride, dpos.get(), n_tok);
  const std::vector<uint8_t> got_k = dev.k.download(), got_v = dev.v.download();
  const std::vector<int32_t> got_pos = dev.pos.download();
  std::vector<uint8_t> want_k(dev.k_row), want_v(dev.v_row);
  for (int t = 0; t < n_tok; ++t)
    for (int g = 0; g < n_kv; ++g) {
      kv_store_row(tk, k.data() + t * stride + g * d, want_k.data(), d);
      kv_store_row(tv, v.data() + t * stride + g * d, want_v.data(), d);
      const size_t row = static_cast<size_t>(g) * cap + row0 + t;
      ASSERT_TRUE(std::equal(want_k.begin(), want_k.end(), got_k.begin() + static_cast<long>(row * dev.k_row)))
          << what << " key of token " << t << " head " << g;
      ASSERT_TRUE(std::equal(want_v.begin(), want_v.end(), got_v.begin() + static_cast<long>(row * dev.v_row)))
          << what << " value of token " << t << " head " << g;
      ASSERT_EQ(got_pos[row], pos[static_cast<size_t>(t)]) << what;
    }
}

TEST(KernelKvRows, AppendStoresWhatTheCpuStores) {
  for (const int d : {40, 64})
    for (const auto& [tk, tv] : device_row_types(d)) append_case(d, tk, tv);
}

void remove_case(int d, KvType tk, KvType tv) {
  const int n_kv = 4, n = 21, cap = 24;
  const std::string what = "d=" + std::to_string(d) + kv_types_label(tk, tv);
  KvCache cache(1, n_kv, d, cap, 0, tk, tv);
  for (int t = 0; t < n; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, 10 + 2 * t), v = random_floats(static_cast<size_t>(n_kv) * d, 11 + 2 * t);
    cache.append(0, k.data(), v.data(), 7 * t);
  }
  DeviceKvLayer dev(cache, 0, cap);
  // The scratch area: another capacity than the cache's (rows are addressed by each one's own).
  const KvCache empty(1, n_kv, d, n + 1, 0, tk, tv);
  DeviceKvLayer scratch(empty, 0, n + 1), small(empty, 0, n - 1);
  // The first row, none, the last row, a row in the middle (the rows after it span three blocks).
  const std::vector<int32_t> victim{0, -1, 20, 9};
  DeviceBuffer<int32_t> dvictim(victim);
  EXPECT_THROW(remove_rows(dev.mut(), small.mut(), dvictim.get(), n), Error) << "a scratch area of fewer rows than held";
  remove_rows(dev.mut(), scratch.mut(), dvictim.get(), n);
  const std::vector<uint8_t> got_k = dev.k.download(), got_v = dev.v.download();
  const std::vector<int32_t> got_pos = dev.pos.download();
  for (int g = 0; g < n_kv; ++g) {
    std::vector<char> keep(n, 1);
    if (victim[static_cast<size_t>(g)] >= 0) keep[static_cast<size_t>(victim[static_cast<size_t>(g)])] = 0;
    cache.compact(0, g, keep, false);
    const KvHead& kh = cache.head(0, g);
    ASSERT_TRUE(std::equal(kh.k.begin(), kh.k.end(), got_k.begin() + static_cast<long>(g * cap * dev.k_row))) << what << " keys of head " << g;
    ASSERT_TRUE(std::equal(kh.v.begin(), kh.v.end(), got_v.begin() + static_cast<long>(g * cap * dev.v_row))) << what << " values of head " << g;
    ASSERT_TRUE(std::equal(kh.pos.begin(), kh.pos.end(), got_pos.begin() + g * cap)) << what << " positions of head " << g;
  }
}

// A local layer's trim: the oldest `by` rows of every head go, as KvCache::drop_before drops them.
void drop_front_case(int d, KvType tk, KvType tv, int by) {
  const int n_kv = 2, n = 21, cap = 24;
  const std::string what = "d=" + std::to_string(d) + kv_types_label(tk, tv) + " by " + std::to_string(by);
  KvCache cache(1, n_kv, d, cap, 0, tk, tv);
  for (int t = 0; t < n; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, 50 + 2 * t), v = random_floats(static_cast<size_t>(n_kv) * d, 51 + 2 * t);
    cache.append(0, k.data(), v.data(), 3 * t);
  }
  DeviceKvLayer dev(cache, 0, cap);
  const KvCache empty(1, n_kv, d, cap, 0, tk, tv);
  DeviceKvLayer scratch(empty, 0, cap);
  DeviceBuffer<int32_t> row(std::vector<int32_t>(n_kv, by - 1));
  shift_rows_up(dev.mut(), scratch.mut(), row.get(), n, by);
  cache.drop_before(0, 3 * by);
  const std::vector<uint8_t> got_k = dev.k.download(), got_v = dev.v.download();
  const std::vector<int32_t> got_pos = dev.pos.download();
  for (int g = 0; g < n_kv; ++g) {
    const KvHead& kh = cache.head(0, g);
    ASSERT_EQ(kh.n, n - by) << what;
    ASSERT_TRUE(std::equal(kh.k.begin(), kh.k.begin() + static_cast<long>(kh.n * dev.k_row), got_k.begin() + static_cast<long>(g * cap * dev.k_row)))
        << what << " keys of head " << g;
    ASSERT_TRUE(std::equal(kh.v.begin(), kh.v.begin() + static_cast<long>(kh.n * dev.v_row), got_v.begin() + static_cast<long>(g * cap * dev.v_row)))
        << what << " values of head " << g;
    ASSERT_TRUE(std::equal(kh.pos.begin(), kh.pos.begin() + kh.n, got_pos.begin() + g * cap)) << what << " positions of head " << g;
  }
}

TEST(KernelKvRows, ShiftRowsUpDropsTheOldestRowsLikeTheCpu) {
  for (const int by : {1, 5, 13})
    for (const auto& [tk, tv] : device_row_types(64)) drop_front_case(64, tk, tv, by);
}

TEST(KernelKvRows, RemoveRowMovesTheStoredBytesLikeTheCpuCompaction) {
  for (const int d : {40, 64})
    for (const auto& [tk, tv] : device_row_types(d)) remove_case(d, tk, tv);
}

}  // namespace
}  // namespace slake::gpu::test
