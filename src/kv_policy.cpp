#include "slake/kv_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "slake/error.h"
#include "slake/kv_budget.h"
#include "slake/ops.h"

namespace slake {

namespace {
// The spec's 1-D average pool (kernel 5, stride 1, zero padding 2) before its division by 5:
// the sum of v[j-2 .. j+2] inside [0, n).
double window_sum5(const double* v, int n, int j) {
  double acc = 0;
  for (int k = std::max(0, j - 2); k <= std::min(n - 1, j + 2); ++k) acc += v[k];
  return acc;
}
}  // namespace

const std::vector<std::string>& kv_policy_names() {
  static const std::vector<std::string> names{"full", "streaming", "h2o", "snapkv", "pyramidkv", "cake", "slake"};
  return names;
}

void validate(const KvPolicyParams& p) {
  const std::vector<std::string>& names = kv_policy_names();
  if (std::find(names.begin(), names.end(), p.policy) == names.end()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    fail("unknown KV policy '" + p.policy + "' (" + list + ")");
  }
  if (p.compensate != "auto" && p.compensate != "taylor" && p.compensate != "none")
    fail("unknown KV compensator '" + p.compensate + "' (auto, taylor, none)");
  if (p.budget < 0) fail("KV budget must not be negative, got " + std::to_string(p.budget));
  if (p.window < 1) fail("KV observation window must be positive, got " + std::to_string(p.window));
  if (p.policy != "full" && p.budget > 0 && p.budget <= p.window)
    fail("KV budget " + std::to_string(p.budget) + " must be larger than the window " + std::to_string(p.window));
  if (!(p.gamma >= 0)) fail("KV indicator weight gamma must not be negative");
  for (const std::optional<double>& t : {p.tau1, p.tau2})
    if (t && !(*t > 0)) fail("KV CAKE exponents tau1/tau2 must be positive");
  for (const std::optional<double>& t : {p.alpha, p.beta})
    if (t && !(*t >= 0 && std::isfinite(*t))) fail("KV VABS exponents alpha/beta must not be negative");
}

KvPolicyParams resolve_kv_defaults(KvPolicyParams p, const ModelConfig& c) {
  // The spec's tables are per model; models are told apart by shape, so any conversion of them
  // (GGUF or HF, any quantisation) gets the same defaults. Budgets between the tabulated ones take
  // the nearer (geometrically) of the two.
  enum { Other, Llama31_8B, Llama2_7B, Mistral7B_v03 } model = Other;
  if (c.n_layers == 32 && c.dim == 4096) {
    if (c.n_vocab == 128256 && c.n_kv_heads == 8) model = Llama31_8B;
    else if (c.n_vocab == 32000 && c.n_kv_heads == 32) model = Llama2_7B;
    else if (c.n_vocab == 32768 && c.n_kv_heads == 8) model = Mistral7B_v03;
  }
  const bool big_tau = p.budget * p.budget > 128 * 1024;  // nearer 1024 than 128
  const bool big_ab = p.budget * p.budget > 128 * 256;    // nearer 256 than 128
  double t1 = 1.0, t2 = 1.0, a = 0.5, b = 0.4;
  switch (model) {
    case Llama31_8B: t1 = 1.6; t2 = big_tau ? 0.4 : 0.6; a = big_ab ? 0.6 : 0.4; b = big_ab ? 0.5 : 0.2; break;
    case Llama2_7B: t1 = big_tau ? 1.9 : 0.9; t2 = big_tau ? 1.8 : 2.3; break;
    case Mistral7B_v03: t1 = big_tau ? 0.8 : 1.0; t2 = big_tau ? 0.5 : 0.8; a = big_ab ? 0.4 : 0.6; b = big_ab ? 0.2 : 0.5; break;
    case Other: break;
  }
  if (!p.tau1) p.tau1 = t1;
  if (!p.tau2) p.tau2 = t2;
  if (!p.alpha) p.alpha = a;
  if (!p.beta) p.beta = b;
  return p;
}

LayerStats window_stats(const float* q_window, int S, int window, const KvCache& cache, int layer, const AttentionShape& s,
                        double gamma, ThreadPool& pool) {
  const int P = S - window, d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<std::vector<double>> ind(static_cast<size_t>(s.n_heads));  // per query head, before pooling
  std::vector<double> head_entropy(static_cast<size_t>(s.n_heads)), head_var(static_cast<size_t>(s.n_heads));
  pool.parallel_for(s.n_heads, 1, [&](int64_t hb, int64_t he, int) {
    std::vector<double> sum(static_cast<size_t>(P)), sumsq(static_cast<size_t>(P));
    std::vector<float> a(static_cast<size_t>(S));
    for (int64_t h = hb; h < he; ++h) {
      const KvHead& kv = cache.head(layer, static_cast<int>(h) / group);
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(sumsq.begin(), sumsq.end(), 0.0);
      double entropy = 0;
      for (int i = 0; i < window; ++i) {
        const float* q = q_window + (static_cast<size_t>(i) * s.n_heads + static_cast<size_t>(h)) * d;
        const int n_vis = P + i + 1;  // causal inside the window
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n_vis; ++j) m = std::max(m, a[static_cast<size_t>(j)] = dot_f32(q, kv.key(j, d), d) * scale);
        double z = 0;
        for (int j = 0; j < n_vis; ++j) z += (a[static_cast<size_t>(j)] = std::exp(a[static_cast<size_t>(j)] - m));
        for (int j = 0; j < P; ++j) {
          const double A = a[static_cast<size_t>(j)] / z;
          sum[static_cast<size_t>(j)] += A;
          sumsq[static_cast<size_t>(j)] += A * A;
          entropy -= A * std::log(A + 1e-10);
        }
      }
      std::vector<double>& I = ind[static_cast<size_t>(h)];
      I.resize(static_cast<size_t>(P));
      double var_total = 0;
      for (int j = 0; j < P; ++j) {
        const double mean = sum[static_cast<size_t>(j)] / window;
        const double var = window > 1 ? std::max(0.0, (sumsq[static_cast<size_t>(j)] - window * mean * mean) / (window - 1)) : 0.0;
        I[static_cast<size_t>(j)] = mean + gamma * var;
        var_total += var;
      }
      head_entropy[static_cast<size_t>(h)] = entropy;
      head_var[static_cast<size_t>(h)] = var_total;
    }
  });
  LayerStats st;
  st.entropy = std::accumulate(head_entropy.begin(), head_entropy.end(), 0.0);
  st.variance = std::accumulate(head_var.begin(), head_var.end(), 0.0);
  st.indicator.assign(static_cast<size_t>(s.n_kv_heads), std::vector<float>(static_cast<size_t>(P), 0.0f));
  for (int h = 0; h < s.n_heads; ++h) {
    const std::vector<double>& I = ind[static_cast<size_t>(h)];
    std::vector<float>& out = st.indicator[static_cast<size_t>(h / group)];
    for (int j = 0; j < P; ++j)  // average pool, always divided by 5, then the mean over the group
      out[static_cast<size_t>(j)] += static_cast<float>(window_sum5(I.data(), P, j) / 5.0 / group);
  }
  return st;
}

PrefillEvictor::PrefillEvictor(const KvPolicyParams& p, int n_layers) : p_(p), n_layers_(n_layers) { validate(p); }

bool PrefillEvictor::active(int S) const { return p_.policy != "full" && p_.budget > 0 && S > p_.budget + p_.window; }

void PrefillEvictor::evict_to(const std::vector<int64_t>& budgets, int S, KvCache& cache) {
  const int P = S - p_.window;
  for (size_t l = 0; l < budgets.size(); ++l) {
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const KvHead& kh = cache.head(static_cast<int>(l), h);
      const std::vector<float>& I = stats_[l].indicator[static_cast<size_t>(h)];
      // Held prefix tokens, best first (ties: earlier position first).
      std::vector<int> cand;
      for (int r = 0; r < kh.n; ++r)
        if (kh.pos[static_cast<size_t>(r)] < P) cand.push_back(r);
      const int64_t keep_n = std::min<int64_t>(budgets[l], static_cast<int64_t>(cand.size()));
      if (keep_n == static_cast<int64_t>(cand.size())) continue;
      std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) {
        return I[static_cast<size_t>(kh.pos[static_cast<size_t>(a)])] > I[static_cast<size_t>(kh.pos[static_cast<size_t>(b)])];
      });
      std::vector<char> keep(static_cast<size_t>(kh.n), 1);
      for (size_t c = static_cast<size_t>(keep_n); c < cand.size(); ++c) keep[static_cast<size_t>(cand[c])] = 0;
      cache.compact(static_cast<int>(l), h, keep, p_.taylor());
    }
  }
}

void PrefillEvictor::on_layer_done(int layer, const float* q_window, int S, KvCache& cache, const AttentionShape& s,
                                   ThreadPool& pool) {
  if (!active(S)) return;
  if (static_cast<int>(stats_.size()) != layer) fail("internal: layers must be reported in order");
  stats_.push_back(window_stats(q_window, S, p_.window, cache, layer, s, p_.gamma, pool));
  const LayerStats& st = stats_.back();
  scores_.push_back(std::pow(st.entropy, 1.0 / p_.tau1.value_or(1.0)) * std::pow(st.variance, 1.0 / p_.tau2.value_or(1.0)));
  const int64_t total = static_cast<int64_t>(p_.budget - p_.window) * n_layers_;
  const int64_t cap = S - p_.window;
  // Over the layers seen so far the same total; while fewer than total/cap layers are seen, all fit.
  const int64_t seen = static_cast<int64_t>(scores_.size());
  std::vector<int64_t> b = total >= cap * seen ? std::vector<int64_t>(static_cast<size_t>(seen), cap)
                                               : allocate_budgets(scores_, total, cap);
  // Budgets only shrink: a token evicted earlier cannot come back.
  if (p_.cascade)
    for (size_t l = 0; l < budgets_.size(); ++l) b[l] = std::min(b[l], budgets_[l]);
  budgets_ = b;
  if (p_.cascade) evict_to(budgets_, S, cache);
}

void PrefillEvictor::on_decode(int layer, const float* q, int32_t qpos, KvCache& cache, const AttentionShape& s) {
  if (!evicts_in_decode()) return;
  // Layers that saw no prefill eviction keep C - Sw prefix tokens.
  const int64_t b = layer < static_cast<int>(budgets_.size()) ? budgets_[static_cast<size_t>(layer)] : p_.budget - p_.window;
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
    const KvHead& kh = cache.head(layer, kvh);
    while (kh.n > b + p_.window) {
      const int n_cand = kh.n - p_.window;
      std::vector<double> score(static_cast<size_t>(n_cand), 0.0);
      std::vector<float> x(static_cast<size_t>(kh.n));
      std::vector<double> prob(static_cast<size_t>(n_cand));
      for (int g = 0; g < group; ++g) {
        const float* qh = q + static_cast<size_t>(kvh * group + g) * d;
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < kh.n; ++j) {
          // Causal only: the candidates are scored over the whole exact cache.
          x[static_cast<size_t>(j)] = key_visible(kh.pos[static_cast<size_t>(j)], qpos, 0)
                                          ? dot_f32(qh, kh.key(j, d), d) * scale
                                          : -std::numeric_limits<float>::infinity();
          m = std::max(m, x[static_cast<size_t>(j)]);
        }
        double z = 0;
        for (int j = 0; j < kh.n; ++j) z += std::exp(static_cast<double>(x[static_cast<size_t>(j)]) - m);
        for (int j = 0; j < n_cand; ++j) prob[static_cast<size_t>(j)] = std::exp(static_cast<double>(x[static_cast<size_t>(j)]) - m) / z;
        for (int j = 0; j < n_cand; ++j)  // pooled in position order, divided by 5, mean over the group
          score[static_cast<size_t>(j)] += window_sum5(prob.data(), n_cand, j) / 5.0 / group;
      }
      const int victim = static_cast<int>(std::min_element(score.begin(), score.end()) - score.begin());
      std::vector<char> keep(static_cast<size_t>(kh.n), 1);
      keep[static_cast<size_t>(victim)] = 0;
      cache.compact(layer, kvh, keep, p_.taylor());
    }
  }
}

void PrefillEvictor::finish(int S, KvCache& cache) {
  if (!p_.cascade && active(S)) evict_to(budgets_, S, cache);
}

}  // namespace slake
