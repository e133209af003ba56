// What slake-perplexity reports, against long-double brute force and numpy's percentile definition.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "slake/error.h"
#include "slake/logit_stats.h"

namespace slake {
namespace {

std::vector<long double> softmax_ld(const std::vector<float>& x) {
  std::vector<long double> p;
  long double z = 0;
  for (float v : x) z += std::exp(static_cast<long double>(v));
  for (float v : x) p.push_back(std::exp(static_cast<long double>(v)) / z);
  return p;
}

TEST(LogitStats, NllAndKlMatchBruteForce) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + trial * 7;
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (auto& x : a) x = nd(rng);
    for (auto& x : b) x = nd(rng);
    const std::vector<long double> pa = softmax_ld(a), pb = softmax_ld(b);
    long double kl = 0;
    for (int i = 0; i < n; ++i) kl += pa[static_cast<size_t>(i)] * std::log(pa[static_cast<size_t>(i)] / pb[static_cast<size_t>(i)]);
    EXPECT_NEAR(kl_divergence(a.data(), b.data(), n), static_cast<double>(kl), 1e-9 * (1 + kl));
    EXPECT_EQ(kl_divergence(a.data(), a.data(), n), 0.0);
    EXPECT_NEAR(token_nll(a.data(), n, n - 1), static_cast<double>(-std::log(pa.back())), 1e-9);
  }
  const std::vector<float> big{1000.0f, 0.0f, -1000.0f};  // stable where exp() overflows
  EXPECT_NEAR(token_nll(big.data(), 3, 0), 0.0, 1e-12);
  EXPECT_NEAR(token_nll(big.data(), 3, 1), 1000.0, 1e-9);
  EXPECT_EQ(argmax(big.data(), 3), 0);
  EXPECT_THROW(token_nll(big.data(), 3, 3), Error);
}

TEST(LogitStats, PercentileInterpolatesLikeNumpy) {
  // numpy.percentile([5, 1, 4, 2, 3], q) for q = 0, 50, 99, 100 and 25.
  const std::vector<double> v{5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3.0);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 4.96);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 5.0);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 2.0);
  EXPECT_DOUBLE_EQ(percentile({7.0}, 99), 7.0);
  EXPECT_THROW(percentile({}, 50), Error);
}

}  // namespace
}  // namespace slake
