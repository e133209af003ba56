#include "slake/kv/kv_sre.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "slake/kv/ptaa.h"

namespace slake {

LinearState state_with_rows(const KvHead& kh, int r0, int r1, const LinearState& base, int d) {
  LinearState st = base;
  if (st.head_dim == 0) st = LinearState(d, base.centroids);
  if (r1 <= r0) return st;
  std::vector<float> ks(static_cast<size_t>(r1 - r0) * d), vs(ks.size());
  st.absorb_batch(kh.keys(r0, r1 - r0, d, ks.data()), kh.values(r0, r1 - r0, d, vs.data()), r1 - r0, static_cast<size_t>(d));
  return st;
}

void self_recall_errors(const KvHead& kh, int r0, int r1, const LinearState& state, int d, float* sre, float softcap) {
  if (r1 <= r0) return;
  if (state.n <= 0.0f) {
    std::fill(sre, sre + (r1 - r0), 0.0f);
    return;
  }
  std::vector<float> ks(static_cast<size_t>(r1 - r0) * d), vs(ks.size()), out(static_cast<size_t>(d)),
      zero(static_cast<size_t>(d), 0.0f);
  const float* k = kh.keys(r0, r1 - r0, d, ks.data());
  const float* v = kh.values(r0, r1 - r0, d, vs.data());
  for (int i = 0; i < r1 - r0; ++i) {
    // No exact row: m = -inf, l = 0, and the state's output alone.
    ptaa_finish(out.data(), k + static_cast<size_t>(i) * d, -std::numeric_limits<float>::infinity(), 0.0f, zero.data(), state, d, softcap);
    double e = 0;
    for (int j = 0; j < d; ++j) {
      const double x = static_cast<double>(out[static_cast<size_t>(j)]) - v[static_cast<size_t>(i) * d + static_cast<size_t>(j)];
      e += x * x;
    }
    sre[i] = static_cast<float>(e);
  }
}

int64_t sre_mass_keep(const float* sre, int n, double p, int64_t floor, int64_t cap) {
  std::vector<double> s(sre, sre + std::max(n, 0));
  std::sort(s.begin(), s.end(), std::greater<double>());
  double total = 0;
  for (double x : s) total += x;
  int64_t k = 0;
  if (total > 0) {
    const double target = p * total;
    double sum = 0;
    while (k < n && sum < target) sum += s[static_cast<size_t>(k++)];
  }
  return std::min<int64_t>(std::min<int64_t>(std::max(k, floor), cap), n);
}

}  // namespace slake
