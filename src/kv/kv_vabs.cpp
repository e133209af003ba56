// VABS, the layer preference of the slake policy (algorithm.md §2.4, SLAKE eq. 15-18): how far PTAA
// with a uniform budget would move each window query's attention row, weighted by the value norms.
#include <cmath>
#include <limits>

#include "slake/error.h"
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
  threads.parallel_for(s.n_heads, 1, [&](int64_t hb, int64_t he, int) {
    std::vector<double> x, a;
    for (int64_t h = hb; h < he; ++h) {
      const int g = static_cast<int>(h) / group;
      const KvHead& kv = cache.head(layer, g);
      const int Pr = cand[static_cast<size_t>(g)];
      x.resize(static_cast<size_t>(kv.n));
      a.resize(static_cast<size_t>(kv.n));
      const std::vector<char>& keep_j = kept[static_cast<size_t>(g)];
      const std::vector<double>& vn = vnorm[static_cast<size_t>(g)];
      double tv_va = 0, en = 0;
      for (int i = 0; i < n_obs; ++i) {
        const float* q = q_window + (static_cast<size_t>(i) * s.n_heads + static_cast<size_t>(h)) * d;
        const int qpos = S - n_obs + i, n_vis = rows_below(kv, qpos + 1);
        // x: the raw logits, which PTAA's Taylor state is linear in; a: the model's softmax row, of
        // the logits soft-capped as the model caps them (f(x); f(x) = x without a cap).
        attention_logits(q, qpos, kv, d, 0.0f, n_vis, x.data());
        for (int j = 0; j < n_vis; ++j) a[static_cast<size_t>(j)] = soft_cap(x[static_cast<size_t>(j)], static_cast<double>(s.softcap));
        softmax_inplace(a.data(), n_vis);
        // PTAA's row (ptaa.h): exact weights for kept tokens, lambda (1 + g (x - x̄)) / Z for the
        // evicted ones, lambda = exp(f(x̄) - m*), g = f'(x̄).
        double xbar = 0, m = -std::numeric_limits<double>::infinity();
        int n_ev = 0;
        for (int j = 0; j < n_vis; ++j) {
          if (j < Pr && !keep_j[static_cast<size_t>(j)]) {
            xbar += x[static_cast<size_t>(j)];
            ++n_ev;
          } else {
            m = std::max(m, soft_cap(x[static_cast<size_t>(j)], static_cast<double>(s.softcap)));
          }
        }
        if (n_ev > 0) xbar /= n_ev;
        const double mu = soft_cap(xbar, static_cast<double>(s.softcap));
        const double g = soft_cap_slope(xbar, static_cast<double>(s.softcap));
        const double mstar = n_ev > 0 ? std::max(m, mu) : m, lam = n_ev > 0 ? std::exp(mu - mstar) : 0.0;
        double z = lam * n_ev;
        for (int j = 0; j < n_vis; ++j)
          if (j >= Pr || keep_j[static_cast<size_t>(j)]) z += std::exp(soft_cap(x[static_cast<size_t>(j)], static_cast<double>(s.softcap)) - mstar);
        double tv = 0, va = 0, vsum = 0, entropy = 0;
        for (int j = 0; j < n_vis; ++j) {
          const bool exact = j >= Pr || keep_j[static_cast<size_t>(j)];
          const double xj = x[static_cast<size_t>(j)];
          const double w = exact ? std::exp(soft_cap(xj, static_cast<double>(s.softcap)) - mstar) / z : lam * (1.0 + g * (xj - xbar)) / z;
          const double A = a[static_cast<size_t>(j)], diff = std::abs(w - A);
          tv += diff;
          va += vn[static_cast<size_t>(j)] * diff;
          vsum += vn[static_cast<size_t>(j)];
          if (A > 0) entropy -= A * std::log(A);
        }
        tv_va += 0.5 * tv * (vsum > 0 ? std::pow(va / vsum, 0.1) : 0.0);
        en += entropy;
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
