// KIVI storage (kv_kivi.h) against float64: keys within each channel's group bound and values
// within each block's bound, derived from the format's rounding; the residual exactly f16; evicted
// rows removed with the others read back bit for bit; groups that lose every row freed; thinned
// groups re-grouped within one more step; and the bytes counted exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "slake/quant/dtype.h"
#include "slake/kv/kv_cache.h"
#include "slake/kv/kv_kivi.h"

namespace slake {
namespace {

constexpr int kD = 64, kG = KiviRows::kGroup;

// Rows whose channels have scales over four decades (keys' outlier channels), with an offset.
std::vector<float> rows_of(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n) * kD);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < kD; ++i) x[static_cast<size_t>(r) * kD + i] = std::pow(10.0f, static_cast<float>(i % 5) - 2.0f) * (g(rng) + (i % 3));
  return x;
}

std::vector<float> f16_of(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
  return y;
}

std::vector<float> load_all(const KiviRows& k) {
  std::vector<float> out(static_cast<size_t>(k.n()) * kD);
  k.load(0, k.n(), out.data());
  return out;
}

// The smallest and largest of `count` values of x from `first`, `stride` apart (a key channel over a
// group's tokens: stride kD; a value block of a token: stride 1).
std::pair<double, double> range_of(const std::vector<float>& x, size_t first, int count, size_t stride) {
  double lo = x[first], hi = x[first];
  for (int k = 1; k < count; ++k) lo = std::min(lo, double(x[first + k * stride])), hi = std::max(hi, double(x[first + k * stride]));
  return {lo, hi};
}

// The bound for values in [lo, hi] at b bits: codes round (x - z) / s for the f16-stored s and z,
// so the error is half a step, plus what rounding z and s to f16 (2^-11 relative, 2^-25 absolute
// below f16's normal range) moves the ends of the grid, plus fp32 arithmetic.
double bound(double lo, double hi, int bits) {
  const double top = (1 << bits) - 1, s = (hi - lo) / top;
  const double s16 = s * (1 + std::ldexp(1.0, -11)) + std::ldexp(1.0, -25);
  return s16 / 2 + std::ldexp(1.0, -11) * (std::fabs(lo) + top * s) + top * std::ldexp(1.0, -25) + 1e-6 * (std::fabs(lo) + std::fabs(hi));
}

TEST(Kivi, KeysAreWithinEachChannelsGroupBoundAndTheResidualIsF16) {
  const int n = 75;
  const std::vector<float> x = rows_of(n, 3), x16 = f16_of(x);
  for (int bits : {2, 4}) {
    KiviRows k(true, bits, kD);
    for (int r = 0; r < n; ++r) k.append(&x[static_cast<size_t>(r) * kD]);
    ASSERT_EQ(k.residual(), n);
    EXPECT_EQ(load_all(k), x16) << "before settle() every row is f16";
    k.settle();
    ASSERT_EQ(k.quantised(), 64);
    ASSERT_EQ(k.residual(), 11);
    ASSERT_EQ(k.groups_in_use(), 2);
    const std::vector<float> y = load_all(k);
    for (int g = 0; g < 2; ++g)
      for (int i = 0; i < kD; ++i) {
        const auto [lo, hi] = range_of(x16, static_cast<size_t>(g) * kG * kD + i, kG, kD);
        const double b = bound(lo, hi, bits);
        for (int r = g * kG; r < (g + 1) * kG; ++r) {
          const size_t e = static_cast<size_t>(r) * kD + i;
          ASSERT_LE(std::fabs(double(y[e]) - x16[e]), b) << bits << " bits, row " << r << " channel " << i;
        }
      }
    for (size_t e = 64 * kD; e < y.size(); ++e) ASSERT_EQ(y[e], x16[e]) << "residual element " << e;
    // Per channel: channel 0 (scale 10^-2) keeps an error of its own range's step; a per-token
    // grid spans the 10^2-scaled channels too, and its step is thousands of times larger.
    EXPECT_LT(std::fabs(y[0] - x16[0]), bound(-5e-2, 5e-2, bits) * 2);
  }
}

TEST(Kivi, ValuesAreWithinEachTokensBlockBound) {
  const int n = 40;
  const std::vector<float> x = rows_of(n, 5), x16 = f16_of(x);
  for (int bits : {2, 4}) {
    KiviRows v(false, bits, kD);
    for (int r = 0; r < n; ++r) v.append(&x[static_cast<size_t>(r) * kD]);
    v.settle();
    ASSERT_EQ(v.quantised(), 32);
    ASSERT_EQ(v.groups_in_use(), 0);
    const std::vector<float> y = load_all(v);
    for (int r = 0; r < 32; ++r)
      for (int b = 0; b < kD / 32; ++b) {
        const auto [lo, hi] = range_of(x16, static_cast<size_t>(r) * kD + b * 32, 32, 1);
        for (int i = b * 32; i < (b + 1) * 32; ++i) {
          const size_t e = static_cast<size_t>(r) * kD + i;
          ASSERT_LE(std::fabs(double(y[e]) - x16[e]), bound(lo, hi, bits)) << bits << " bits, row " << r << " channel " << i;
        }
      }
    EXPECT_EQ(v.bytes(), 32 * v.quantised_row_bytes() + 8 * kD * 2u);
    EXPECT_EQ(v.quantised_row_bytes(), 2 * (4 + 32u * bits / 8));
  }
}

TEST(Kivi, EvictionRemovesRowsAndLeavesTheOthersBitForBit) {
  const int n = 75;
  const std::vector<float> x = rows_of(n, 7);
  KiviRows k(true, 2, kD);
  for (int r = 0; r < n; ++r) k.append(&x[static_cast<size_t>(r) * kD]);
  k.settle();
  const std::vector<float> before = load_all(k);
  std::vector<char> keep(n, 1);
  for (int j : {0, 5, 31, 32, 40, 70}) keep[static_cast<size_t>(j)] = 0;
  k.compact(keep);
  ASSERT_EQ(k.quantised(), 59);
  ASSERT_EQ(k.residual(), 10);
  const std::vector<float> after = load_all(k);
  int w = 0;
  for (int j = 0; j < n; ++j) {
    if (!keep[static_cast<size_t>(j)]) continue;
    for (int i = 0; i < kD; ++i) ASSERT_EQ(after[static_cast<size_t>(w) * kD + i], before[static_cast<size_t>(j) * kD + i]) << "row " << j;
    ++w;
  }
  // 2-bit keys of 64 channels: a 4-byte group index and 16 bytes of codes a row; 10 f16 rows;
  // two groups' f16 scales and minima.
  EXPECT_EQ(k.quantised_row_bytes(), 20u);
  EXPECT_EQ(k.bytes(), 59 * 20u + 10 * 128u + 2 * 256u);

  // A group that loses every row is freed, and the next group takes its place.
  std::vector<char> drop_first(static_cast<size_t>(k.n()), 1);
  for (int j = 0; j < 29; ++j) drop_first[static_cast<size_t>(j)] = 0;  // what was left of group 0
  k.compact(drop_first);
  EXPECT_EQ(k.groups_in_use(), 1);
  for (int r = 0; r < 30; ++r) k.append(&x[static_cast<size_t>(r) * kD]);
  k.settle();
  EXPECT_EQ(k.groups_in_use(), 2);
  EXPECT_EQ(k.bytes(), k.quantised() * 20u + k.residual() * 128u + 2 * 256u);
}

TEST(Kivi, ThinnedGroupsAreRegroupedWithinOneMoreStep) {
  const int n = 128;
  const std::vector<float> x = rows_of(n, 11);
  KiviRows k(true, 4, kD);
  for (int r = 0; r < n; ++r) k.append(&x[static_cast<size_t>(r) * kD]);
  k.settle();
  ASSERT_EQ(k.groups_in_use(), 4);
  // Three rows of each group survive: 12 rows need one group, and four are in use.
  std::vector<char> keep(n, 0);
  for (int g = 0; g < 4; ++g)
    for (int j : {1, 17, 30}) keep[static_cast<size_t>(g * kG + j)] = 1;
  k.compact(keep);
  const std::vector<float> before = load_all(k);
  ASSERT_EQ(k.groups_in_use(), 4);
  k.settle();
  EXPECT_EQ(k.groups_in_use(), 1);
  EXPECT_EQ(k.bytes(), 12 * (4 + 32u) + 256u);
  const std::vector<float> after = load_all(k);
  for (int i = 0; i < kD; ++i) {
    const auto [lo, hi] = range_of(before, i, 12, kD);
    for (int r = 0; r < 12; ++r)
      ASSERT_LE(std::fabs(after[static_cast<size_t>(r) * kD + i] - before[static_cast<size_t>(r) * kD + i]), bound(lo, hi, 4)) << "row " << r << " channel " << i;
  }
}

// The cache counts KIVI's bytes head by head, and stays within the bound it plans with.
TEST(Kivi, CacheBytesAreTheStoredBytesAndWithinThePlan) {
  const int layers = 2, heads = 2, n = 70;
  KvCache cache(layers, heads, kD, n, 0, KvType::KIVI2, KvType::F16);
  const std::vector<float> x = rows_of(n * heads, 13);
  for (int l = 0; l < layers; ++l) {
    for (int j = 0; j < n; ++j) cache.append(l, &x[static_cast<size_t>(j) * heads * kD], &x[static_cast<size_t>(j) * heads * kD], j);
    cache.settle(l);
  }
  // Keys: 64 quantised rows (20 bytes), 6 f16 rows, 2 groups (256 bytes); values f16; positions.
  const size_t per_head = 64 * 20 + 6 * 128 + 2 * 256 + n * 128 + n * 4;
  EXPECT_EQ(cache.bytes_used(), per_head * layers * heads);
  EXPECT_LE(cache.bytes_used(), KvCache::planned_bytes(layers, heads, kD, n, KvType::KIVI2, KvType::F16));
  // A prompt settled at once leaves no f16 copy of itself and no doubled vector behind.
  KvCache big(1, 1, kD, 2112, 0, KvType::KIVI4, KvType::KIVI4);
  const std::vector<float> y = rows_of(2100, 17);
  for (int j = 0; j < 2100; ++j) big.append(0, &y[static_cast<size_t>(j) * kD], &y[static_cast<size_t>(j) * kD], j);
  EXPECT_GT(big.bytes_allocated(), 2100u * 2 * kD * 2);  // the residual: every row in f16, keys and values
  big.settle(0);
  const size_t residual_bound = 2 * 2 * KiviRows::kGroup * kD * 2;  // keys and values: two groups of f16 rows
  EXPECT_LE(big.bytes_allocated(), big.bytes_used() + residual_bound) << big.bytes_used();
  // Attention reads what load() reads: the head's rows.
  std::vector<float> k(static_cast<size_t>(n) * kD);
  cache.head(1, 1).load_keys(0, n, kD, k.data());
  EXPECT_EQ(k, load_all(cache.head(1, 1).kivi_k));
}

}  // namespace
}  // namespace slake
