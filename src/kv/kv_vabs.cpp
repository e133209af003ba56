// VABS, the layer preference of the slake policy (algorithm.md §2.4, SLAKE eq. 15-18): how far PTAA
// with a uniform budget would move each window query's attention row, weighted by the value norms.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "slake/error.h"
#include "slake/kv/attention_rows.h"
#include "slake/kv/kv_scores.h"
#include "slake/model/softcap.h"

namespace slake {

VabsTerms vabs_terms(const float* q_window, int S, int n_obs, int P, const KvCache& cache, int layer, const AttentionShape& s,
                     const std::vector<std::vector<float>>& indicator, int64_t keep, ThreadPool& threads) {
  if (n_obs < 1 || P < 1 || P > S - n_obs) fail("internal: vabs_terms needs 0 < P <= S - n_obs");
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  // Per KV head: which prefix tokens the uniform budget keeps, and each token's share of the value norms.
  // (Rows as window_stats takes them: in position order, indicator[g] for the rows below P.)
  std::vector<std::vector<char>> kept(static_cast<size_t>(s.n_kv_heads));
  std::vector<std::vector<double>> vnorm(static_cast<size_t>(s.n_kv_heads));
  std::vector<int> cand(static_cast<size_t>(s.n_kv_heads));
  for (int g = 0; g < s.n_kv_heads; ++g) {
    const KvHead& kh = cache.head(layer, g);
    cand[static_cast<size_t>(g)] = rows_below(kh, P);
    if (indicator[static_cast<size_t>(g)].size() != static_cast<size_t>(cand[static_cast<size_t>(g)]))
      fail("internal: vabs_terms takes window_stats' indicator");
    kept[static_cast<size_t>(g)] = top_k_flags(indicator[static_cast<size_t>(g)].data(), cand[static_cast<size_t>(g)], keep);
    vnorm[static_cast<size_t>(g)].resize(static_cast<size_t>(kh.n));
    std::vector<float> row(static_cast<size_t>(d));
    for (int j = 0; j < kh.n; ++j) {
      const float* vj = kh.value(j, d, row.data());
      double n2 = 0;
      for (int e = 0; e < d; ++e) n2 += static_cast<double>(vj[e]) * vj[e];
      vnorm[static_cast<size_t>(g)][static_cast<size_t>(j)] = std::sqrt(n2);
    }
  }
  std::vector<double> head_tv_va(static_cast<size_t>(s.n_heads)), head_en(static_cast<size_t>(s.n_heads));
  const double cap = s.softcap;
  threads.parallel_for(s.n_heads, 1, [&](int64_t hb, int64_t he, int) {
    thread_local RowBlock block;
    std::vector<lanes_f> xs;  // 64 bytes a row: not kept past the call
    std::vector<double> x, f, e, we;
    for (int64_t h = hb; h < he; ++h) {
      const int g = static_cast<int>(h) / group;
      const KvHead& kv = cache.head(layer, g);
      const int Pr = cand[static_cast<size_t>(g)];
      const std::vector<char>& keep_j = kept[static_cast<size_t>(g)];
      const std::vector<double>& vn = vnorm[static_cast<size_t>(g)];
      double tv_va = 0, en = 0;
      // The observing queries of head h, kLanes at a time (raw logits), each query's row taken
      // from its lane.
      for (int i0 = 0; i0 < n_obs; i0 += kLanes) {
        const int rows = score_window_block(q_window, S, n_obs, i0, static_cast<int>(h), s, kv, 0.0f, block, xs);
        for (int r = 0; r < rows; ++r) {
          const int n_vis = rows_below(kv, S - n_obs + i0 + r + 1);
          // x: the raw logits, which PTAA's Taylor state is linear in; f: soft-capped as the model
          // caps them (f(x) = x without a cap), whose softmax is the model's row A.
          x.resize(static_cast<size_t>(n_vis));
          f.resize(static_cast<size_t>(n_vis));
          e.resize(static_cast<size_t>(n_vis));
          we.resize(static_cast<size_t>(n_vis));
          for (int j = 0; j < n_vis; ++j) {
            x[static_cast<size_t>(j)] = xs[static_cast<size_t>(j)][r];
            f[static_cast<size_t>(j)] = soft_cap(x[static_cast<size_t>(j)], cap);
          }
          // PTAA's row (ptaa.h): exact weights for kept tokens, lambda (1 + g (x - x̄)) / Z for the
          // evicted ones, lambda = exp(f(x̄) - m*), g = f'(x̄).
          double xbar = 0, m = -std::numeric_limits<double>::infinity(), top = m;
          int n_ev = 0;
          for (int j = 0; j < n_vis; ++j) {
            const double fj = f[static_cast<size_t>(j)];
            top = std::max(top, fj);
            if (j < Pr && !keep_j[static_cast<size_t>(j)]) {
              xbar += x[static_cast<size_t>(j)];
              ++n_ev;
            } else {
              m = std::max(m, fj);
            }
          }
          if (n_ev > 0) xbar /= n_ev;
          const double mu = soft_cap(xbar, cap), slope = soft_cap_slope(xbar, cap);
          const double mstar = n_ev > 0 ? std::max(m, mu) : m, lam = n_ev > 0 ? std::exp(mu - mstar) : 0.0;
          // A_j = e_j / za, e_j = exp(f_j - top); an exact token's weight is exp(f_j - m*) / z.
          double z = lam * n_ev, za = 0;
          for (int j = 0; j < n_vis; ++j) {
            za += (e[static_cast<size_t>(j)] = std::exp(f[static_cast<size_t>(j)] - top));
            const bool exact = j >= Pr || keep_j[static_cast<size_t>(j)];
            z += (we[static_cast<size_t>(j)] = exact ? std::exp(f[static_cast<size_t>(j)] - mstar) : 0.0);
          }
          // The entropy of A without a logarithm per token: log A_j = (f_j - top) - log za.
          double tv = 0, va = 0, vsum = 0, sa = 0, saf = 0;
          for (int j = 0; j < n_vis; ++j) {
            const bool exact = j >= Pr || keep_j[static_cast<size_t>(j)];
            const double xj = x[static_cast<size_t>(j)], fj = f[static_cast<size_t>(j)];
            const double w = exact ? we[static_cast<size_t>(j)] / z : lam * (1.0 + slope * (xj - xbar)) / z;
            const double A = e[static_cast<size_t>(j)] / za, diff = std::abs(w - A);
            tv += diff;
            va += vn[static_cast<size_t>(j)] * diff;
            vsum += vn[static_cast<size_t>(j)];
            if (A > 0) {
              sa += A;
              saf += A * (fj - top);
            }
          }
          tv_va += 0.5 * tv * (vsum > 0 ? std::pow(va / vsum, 0.1) : 0.0);
          if (sa > 0) en += std::log(za) * sa - saf;
        }
      }
      head_tv_va[static_cast<size_t>(h)] = tv_va;
      head_en[static_cast<size_t>(h)] = en;
    }
  });
  VabsTerms t;
  for (int h = 0; h < s.n_heads; ++h) {
    t.tv_va += head_tv_va[static_cast<size_t>(h)];
    t.entropy += head_en[static_cast<size_t>(h)];
  }
  const double rows = static_cast<double>(s.n_heads) * n_obs;
  t.tv_va /= rows;
  t.entropy /= rows;
  return t;
}

}  // namespace slake
