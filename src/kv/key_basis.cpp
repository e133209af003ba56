#include "slake/kv/key_basis.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>

#include "slake/cpu/ops.h"
#include "slake/error.h"

namespace slake {

namespace {

// Rounds of V <- C V, then Gram-Schmidt: the span converges to the leading eigenvectors' at the
// rate of the eigenvalue gap after the r-th; it need not be exact, only good enough to rank keys.
constexpr int kIterations = 64;

// A fixed stream of numbers in [-1, 1) (splitmix64), so that a fit is the same on every platform.
double next_uniform(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
}

// Orthonormalises the r columns of V (d x r, column-major) in place. A column with nothing left
// after the earlier ones (less than kLost of its length: C V_i fell in the span of C's earlier
// columns, as when two starting channels move together, or the keys have rank below i) is
// re-seeded with a pseudo-random vector: left at zero, C 0 = 0 would keep it there and lose the
// direction for good, where the next round of C V brings out whatever of it the keys have.
constexpr double kLost = 1e-11;
void orthonormalise(std::vector<double>& V, int d, int r, uint64_t& seed) {
  for (int i = 0; i < r; ++i) {
    double* v = V.data() + static_cast<size_t>(i) * d;
    double norm = 0.0;
    for (int attempt = 0; attempt < 4; ++attempt) {
      const double before = std::sqrt(std::inner_product(v, v + d, v, 0.0));
      for (int pass = 0; pass < 2; ++pass)  // twice: the second removes what rounding left of the first
        for (int j = 0; j < i; ++j) {
          const double* u = V.data() + static_cast<size_t>(j) * d;
          const double dot = std::inner_product(v, v + d, u, 0.0);
          for (int e = 0; e < d; ++e) v[e] -= dot * u[e];
        }
      norm = std::sqrt(std::inner_product(v, v + d, v, 0.0));
      if (norm > kLost * before && norm > 1e-150) break;
      for (int e = 0; e < d; ++e) v[e] = next_uniform(seed);
      norm = 0.0;
    }
    if (norm > 0.0) for (int e = 0; e < d; ++e) v[e] /= norm;
    else std::fill(v, v + d, 0.0);
  }
}

}  // namespace

void KeyBasis::key_coords(const float* k, float* c) const {
  thread_local std::vector<float> centred;
  centred.resize(static_cast<size_t>(d));
  for (int e = 0; e < d; ++e) centred[static_cast<size_t>(e)] = k[e] - mean[static_cast<size_t>(e)];
  for (int i = 0; i < r; ++i) c[i] = dot_f32(key.data() + static_cast<size_t>(i) * d, centred.data(), d);
}

void KeyBasis::query_coords(const float* q, float* c) const {
  for (int i = 0; i < r; ++i) c[i] = dot_f32(query.data() + static_cast<size_t>(i) * d, q, d);
}

bool KeyBasis::consistent() const {
  if (r == 0) return d == 0 && mean.empty() && key.empty() && query.empty();
  const size_t rd = static_cast<size_t>(r) * static_cast<size_t>(d);
  return d > 0 && r > 0 && r <= d && mean.size() == static_cast<size_t>(d) && key.size() == rd && query.size() == rd;
}

KeyBasis fit_key_basis(const float* keys, int n, int d, int r) {
  if (n < 1 || d < 1 || r < 1 || r > d)
    fail("internal: a key basis of rank " + std::to_string(r) + " from " + std::to_string(n) + " keys of " + std::to_string(d));
  const size_t D = static_cast<size_t>(d);
  std::vector<double> mu(D, 0.0), C(D * D, 0.0), x(D);
  for (int j = 0; j < n; ++j)
    for (size_t e = 0; e < D; ++e) mu[e] += keys[static_cast<size_t>(j) * D + e];
  for (double& m : mu) m /= n;
  for (int j = 0; j < n; ++j) {
    for (size_t e = 0; e < D; ++e) x[e] = keys[static_cast<size_t>(j) * D + e] - mu[e];
    for (size_t a = 0; a < D; ++a)
      for (size_t b = a; b < D; ++b) C[a * D + b] += x[a] * x[b];
  }
  for (size_t a = 0; a < D; ++a)
    for (size_t b = a; b < D; ++b) C[b * D + a] = C[a * D + b] /= n;
  // Start from the r channels of largest variance, then iterate.
  std::vector<int> order(D);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return C[static_cast<size_t>(a) * (D + 1)] > C[static_cast<size_t>(b) * (D + 1)]; });
  std::vector<double> V(D * static_cast<size_t>(r), 0.0), W(V.size());
  uint64_t seed = 0;
  for (int i = 0; i < r; ++i) V[static_cast<size_t>(i) * D + static_cast<size_t>(order[static_cast<size_t>(i)])] = 1.0;
  for (int it = 0; it < kIterations; ++it) {
    for (int i = 0; i < r; ++i)
      for (size_t a = 0; a < D; ++a)
        W[static_cast<size_t>(i) * D + a] = std::inner_product(C.begin() + static_cast<std::ptrdiff_t>(a * D),
                                                               C.begin() + static_cast<std::ptrdiff_t>((a + 1) * D),
                                                               V.begin() + static_cast<std::ptrdiff_t>(i * D), 0.0);
    V.swap(W);
    orthonormalise(V, d, r, seed);
  }
  // A direction along which the keys vary by no more than rounding (keys of lower rank than r, or
  // all alike) keeps zero rows: scaled to unit variance, its noise would count as much as a key's
  // real coordinates when they are rounded to int8 together.
  double trace = 0.0;
  for (size_t a = 0; a < D; ++a) trace += C[a * (D + 1)];
  KeyBasis B;
  B.d = d;
  B.r = r;
  B.mean.assign(mu.begin(), mu.end());
  B.key.assign(static_cast<size_t>(r) * D, 0.0f);
  B.query.assign(static_cast<size_t>(r) * D, 0.0f);
  for (int i = 0; i < r; ++i) {
    const double* v = V.data() + static_cast<size_t>(i) * D;
    double var = 0.0;  // v^T C v
    for (size_t a = 0; a < D; ++a) var += v[a] * std::inner_product(C.begin() + static_cast<std::ptrdiff_t>(a * D),
                                                                  C.begin() + static_cast<std::ptrdiff_t>((a + 1) * D), v, 0.0);
    if (!(var > 1e-10 * trace)) continue;  // both rows stay zero
    const double s = std::sqrt(var);
    for (size_t a = 0; a < D; ++a) {
      B.key[static_cast<size_t>(i) * D + a] = static_cast<float>(v[a] / s);
      B.query[static_cast<size_t>(i) * D + a] = static_cast<float>(v[a] * s);
    }
  }
  return B;
}

}  // namespace slake
