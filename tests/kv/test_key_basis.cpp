// The low-rank key basis (src/kv/key_basis.cpp) against float64: keys drawn about a mean along r
// known orthonormal directions of distinct spread, plus a little noise in every other direction.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "slake/error.h"
#include "slake/kv/key_basis.h"

namespace slake {
namespace {

// d orthonormal vectors (rows) from Gaussian ones by Gram-Schmidt in float64.
std::vector<std::vector<double>> orthonormal_rows(int d, std::mt19937& rng) {
  std::normal_distribution<double> nd;
  std::vector<std::vector<double>> U;
  while (static_cast<int>(U.size()) < d) {
    std::vector<double> v(static_cast<size_t>(d));
    for (double& x : v) x = nd(rng);
    for (const auto& u : U) {
      const double dot = std::inner_product(v.begin(), v.end(), u.begin(), 0.0);
      for (int e = 0; e < d; ++e) v[static_cast<size_t>(e)] -= dot * u[static_cast<size_t>(e)];
    }
    const double n = std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
    for (double& x : v) x /= n;
    U.push_back(v);
  }
  return U;
}

TEST(KeyBasis, SpansTheKeysLeadingDirections) {
  const int d = 64, r = 16, n = 3000;
  std::mt19937 rng(7);
  const auto U = orthonormal_rows(d, rng);
  std::normal_distribution<double> nd;
  std::vector<double> mu(static_cast<size_t>(d));
  for (double& x : mu) x = 3 * nd(rng);
  std::vector<float> keys(static_cast<size_t>(n) * d);
  for (int j = 0; j < n; ++j) {
    std::vector<double> k = mu;
    for (int i = 0; i < d; ++i) {
      const double spread = i < r ? 8.0 * std::pow(0.85, i) : 0.01;  // the r-th: 0.69; then noise
      const double z = spread * nd(rng);
      for (int e = 0; e < d; ++e) k[static_cast<size_t>(e)] += z * U[static_cast<size_t>(i)][static_cast<size_t>(e)];
    }
    for (int e = 0; e < d; ++e) keys[static_cast<size_t>(j) * d + e] = static_cast<float>(k[static_cast<size_t>(e)]);
  }
  const KeyBasis B = fit_key_basis(keys.data(), n, d, r);
  ASSERT_TRUE(B.fitted());
  ASSERT_TRUE(B.consistent());
  // The mean is the keys' mean.
  for (int e = 0; e < d; ++e) {
    double m = 0;
    for (int j = 0; j < n; ++j) m += keys[static_cast<size_t>(j) * d + e];
    EXPECT_NEAR(B.mean[static_cast<size_t>(e)], m / n, 1e-5 * (1 + std::abs(m / n)));
  }
  // The projector sum_i key_i query_i^T (= V V^T) is the r known directions' within sampling error.
  double err = 0;
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b) {
      double fit = 0, truth = 0;
      for (int i = 0; i < r; ++i) {
        fit += static_cast<double>(B.key[static_cast<size_t>(i * d + a)]) * B.query[static_cast<size_t>(i * d + b)];
        truth += U[static_cast<size_t>(i)][static_cast<size_t>(a)] * U[static_cast<size_t>(i)][static_cast<size_t>(b)];
      }
      err += (fit - truth) * (fit - truth);
    }
  EXPECT_LT(std::sqrt(err), 0.02) << "projector distance (of sqrt(r) = 4)";
  // Each coordinate of the keys has unit variance and mean 0 (the scaling of key and query rows).
  std::vector<float> c(static_cast<size_t>(r));
  std::vector<double> sum(static_cast<size_t>(r), 0.0), sq(static_cast<size_t>(r), 0.0);
  for (int j = 0; j < n; ++j) {
    B.key_coords(keys.data() + static_cast<size_t>(j) * d, c.data());
    for (int i = 0; i < r; ++i) sum[static_cast<size_t>(i)] += c[static_cast<size_t>(i)], sq[static_cast<size_t>(i)] += c[static_cast<size_t>(i)] * c[static_cast<size_t>(i)];
  }
  for (int i = 0; i < r; ++i) {
    EXPECT_NEAR(sum[static_cast<size_t>(i)] / n, 0.0, 1e-4) << i;
    EXPECT_NEAR(sq[static_cast<size_t>(i)] / n, 1.0, 1e-3) << i;
  }
  // q' . c = q . V V^T (k - mu), with V V^T the fitted projector, in float64.
  std::vector<float> q(static_cast<size_t>(d)), qc(static_cast<size_t>(r));
  for (float& x : q) x = static_cast<float>(nd(rng));
  B.query_coords(q.data(), qc.data());
  for (int j = 0; j < 20; ++j) {
    const float* k = keys.data() + static_cast<size_t>(j) * d;
    B.key_coords(k, c.data());
    double got = 0, want = 0;
    for (int i = 0; i < r; ++i) got += static_cast<double>(qc[static_cast<size_t>(i)]) * c[static_cast<size_t>(i)];
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b) {
        double p = 0;
        for (int i = 0; i < r; ++i) p += static_cast<double>(B.key[static_cast<size_t>(i * d + a)]) * B.query[static_cast<size_t>(i * d + b)];
        want += static_cast<double>(q[static_cast<size_t>(a)]) * p * (k[b] - static_cast<double>(B.mean[static_cast<size_t>(b)]));
      }
    EXPECT_NEAR(got, want, 1e-4 * (1 + std::abs(want))) << j;
  }
}

// Keys along fewer directions than the rank asked for, or all equal: finite coordinates, zero
// along the directions the keys do not vary in.
TEST(KeyBasis, KeysOfLowerRankGiveFiniteCoordinates) {
  const int d = 32, r = 8, n = 200;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> keys(static_cast<size_t>(n) * d, 1.5f);
  for (int j = 0; j < n; ++j)
    for (int e = 0; e < 3; ++e) keys[static_cast<size_t>(j) * d + e] += nd(rng);  // 3 directions
  std::vector<float> same(keys.size(), 0.25f);
  for (const auto* ks : {&keys, &same}) {
    const KeyBasis B = fit_key_basis(ks->data(), n, d, r);
    std::vector<float> c(static_cast<size_t>(r)), q(static_cast<size_t>(d), 1.0f);
    for (int j = 0; j < n; j += 17) {
      B.key_coords(ks->data() + static_cast<size_t>(j) * d, c.data());
      for (float x : c) ASSERT_TRUE(std::isfinite(x));
    }
    B.query_coords(q.data(), c.data());
    for (float x : c) ASSERT_TRUE(std::isfinite(x));
    int live = 0;  // directions with a nonzero key row
    for (int i = 0; i < r; ++i) {
      double n2 = 0;
      for (int e = 0; e < d; ++e) n2 += static_cast<double>(B.key[static_cast<size_t>(i * d + e)]) * B.key[static_cast<size_t>(i * d + e)];
      live += n2 > 1e-6;
    }
    EXPECT_EQ(live, ks == &keys ? 3 : 0);
  }
  EXPECT_THROW(fit_key_basis(keys.data(), n, d, d + 1), Error);
}

// Two starting channels that move together (keys' channels 0 and 1 equal) give the same C V
// column twice; the second has nothing left once the first is taken out. Keys of rank 2 (channels
// 0 = 1 and 2, exactly uncorrelated) must still be spanned by a basis of rank 2: its projector
// V V^T gives each centred key back (sum_i key_i (query_i . x) = V V^T x).
TEST(KeyBasis, FindsTheDirectionTwoCollapsedStartingChannelsHide) {
  const int d = 6, r = 2, n = 4;
  const float t[n] = {1, -1, 1, -1}, s[n] = {0.5f, 0.5f, -0.5f, -0.5f};
  std::vector<float> keys(static_cast<size_t>(n) * d, 0.0f);
  for (int j = 0; j < n; ++j) {
    float* k = keys.data() + static_cast<size_t>(j) * d;
    k[0] = k[1] = t[j];
    k[2] = s[j];
    k[5] = 2.0f;  // a constant channel: in the mean, not in the span
  }
  const KeyBasis B = fit_key_basis(keys.data(), n, d, r);
  ASSERT_TRUE(B.consistent());
  for (int j = 0; j < n; ++j) {
    std::vector<double> x(static_cast<size_t>(d));
    for (int e = 0; e < d; ++e) x[static_cast<size_t>(e)] = keys[static_cast<size_t>(j) * d + e] - static_cast<double>(B.mean[static_cast<size_t>(e)]);
    for (int a = 0; a < d; ++a) {
      double back = 0;
      for (int i = 0; i < r; ++i) {
        double qx = 0;
        for (int b = 0; b < d; ++b) qx += static_cast<double>(B.query[static_cast<size_t>(i * d + b)]) * x[static_cast<size_t>(b)];
        back += static_cast<double>(B.key[static_cast<size_t>(i * d + a)]) * qx;
      }
      EXPECT_NEAR(back, x[static_cast<size_t>(a)], 1e-5) << "key " << j << " channel " << a;
    }
  }
}

}  // namespace
}  // namespace slake
