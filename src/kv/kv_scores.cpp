#include "slake/kv/kv_scores.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "slake/kv/attention_rows.h"
#include "slake/kv/kv_ahakv.h"
#include "slake/error.h"

namespace slake {

void pool_tokens(const double* in, int n, TokenPool pool, double* out) {
  const int half = pool == TokenPool::Avg5 ? 2 : 3;
  for (int j = 0; j < n; ++j) {
    const int lo = std::max(0, j - half), hi = std::min(n - 1, j + half);
    if (pool == TokenPool::Avg5) {
      double acc = 0;
      for (int k = lo; k <= hi; ++k) acc += in[k];
      out[j] = acc / 5.0;
    } else {
      out[j] = *std::max_element(in + lo, in + hi + 1);
    }
  }
}

void DecodeRowScores::compute(const float* q, int group_, int32_t qpos, const KvHead& kh, int d, float softcap) {
  group = group_;
  n = kh.n;
  x.resize(static_cast<size_t>((group + kLanes - 1) / kLanes));
  thread_local RowBlock block;
  const float* qr[kLanes];
  int32_t pr[kLanes];
  for (int g0 = 0; g0 < group; g0 += kLanes) {
    const int rows = std::min(kLanes, group - g0);
    for (int r = 0; r < rows; ++r) {
      qr[r] = q + static_cast<size_t>(g0 + r) * d;
      pr[r] = qpos;
    }
    std::vector<lanes_f>& xb = x[static_cast<size_t>(g0 / kLanes)];
    xb.resize(static_cast<size_t>(n));
    block.begin(qr, pr, rows, d, softcap);
    block.scores(kh, n, xb.data());
  }
}

void DecodeRowScores::erase(int r) {
  if (r < 0 || r >= n) fail("internal: decode scores have no row " + std::to_string(r));
  for (std::vector<lanes_f>& xb : x) xb.erase(xb.begin() + r);
  --n;
}

void DecodeRowScores::keep_rows(const std::vector<char>& keep) {
  if (keep.size() != static_cast<size_t>(n)) fail("internal: decode scores keep " + std::to_string(keep.size()) + " flags for " + std::to_string(n) + " rows");
  int w = 0;
  for (std::vector<lanes_f>& xb : x) {
    w = 0;
    for (int r = 0; r < n; ++r)
      if (keep[static_cast<size_t>(r)]) xb[static_cast<size_t>(w++)] = xb[static_cast<size_t>(r)];
    xb.resize(static_cast<size_t>(w));
  }
  n = x.empty() ? static_cast<int>(std::count(keep.begin(), keep.end(), 1)) : w;
}

namespace {

// Part `part` of every lane's softmax over the rows x[0..n): e[j] = exp(x[j] - ref), ref the
// lane's largest logit, and inv = 1 / z, z = sum_j e[j], turns them into probabilities. A lane
// whose rows are all -inf (no query, or no key visible) gets ref = 0 and 0 for e, z and inv. The
// logits are multiplied by `gain` first (the step gain of algorithm.md §2.3; 1 leaves them as
// they are). In fp32, one native-width part at a time (lanes.h).
struct LaneSoftmax {
  part_f ref, z, inv;
};
LaneSoftmax lane_softmax(const lanes_f* x, int n, int part, part_f* e, part_f gain = part_f{} + 1.0f) {
  const part_f neg_inf = part_f{} - std::numeric_limits<float>::infinity();
  part_f m = neg_inf;
  for (int j = 0; j < n; ++j) {
    const part_f v = part_of<part_f>(x[j], part) * gain;
    m = m > v ? m : v;
  }
  const part_f ref = m == neg_inf ? part_f{} : m;
  part_f z{};
  for (int j = 0; j < n; ++j) z += (e[j] = part_exp(part_of<part_f>(x[j], part) * gain - ref));
  return {ref, z, z > part_f{} ? 1.0f / z : part_f{}};
}
part_f lane_softmax_part(const lanes_f* x, int n, int part, part_f* e, part_f gain = part_f{} + 1.0f) {
  return lane_softmax(x, n, part, e, gain).inv;
}

// Adds to sum[j], for j < n_add <= n, the probabilities of row j in the softmax over x[0..n) of
// each of the first `rows` lanes, summed over those lanes (in double). Lanes from `rows` on are
// not read. `gain`: each lane's step gain (null: none).
void add_lane_softmax(const lanes_f* x, int n, int rows, int n_add, double* sum, const lanes_f* gain = nullptr) {
  thread_local std::vector<part_f> e;
  e.resize(static_cast<size_t>(n));
  for (int part = 0; part * kPartLanes < rows; ++part) {
    const int in_part = std::min(kPartLanes, rows - part * kPartLanes);
    const part_f inv = gain ? lane_softmax_part(x, n, part, e.data(), part_of<part_f>(*gain, part)) : lane_softmax_part(x, n, part, e.data());
    for (int j = 0; j < n_add; ++j) {
      const part_f p = e[static_cast<size_t>(j)] * inv;
      double t = 0;
      for (int r = 0; r < in_part; ++r) t += p[r];
      sum[j] += t;
    }
  }
}

}  // namespace

void decode_scores(const DecodeRowScores& xs, int n_cand, TokenPool pool, double* score) {
  std::fill(score, score + n_cand, 0.0);
  if (pool == TokenPool::Avg5) {
    // Avg5 pools with a sum, which commutes with the mean over the heads: each candidate's
    // probability is summed over the group first (prob), and the pooling runs once on that sum.
    thread_local std::vector<double> prob;
    prob.assign(static_cast<size_t>(n_cand), 0.0);
    for (int g0 = 0; g0 < xs.group; g0 += kLanes)
      add_lane_softmax(xs.x[static_cast<size_t>(g0 / kLanes)].data(), xs.n, std::min(kLanes, xs.group - g0), n_cand, prob.data());
    pool_tokens(prob.data(), n_cand, TokenPool::Avg5, score);
    for (int j = 0; j < n_cand; ++j) score[j] /= xs.group;
    return;
  }
  // Max7 pools with a maximum, per head, before the mean.
  thread_local std::vector<part_f> e;
  e.resize(static_cast<size_t>(xs.n));
  for (int g0 = 0; g0 < xs.group; g0 += kLanes) {
    const std::vector<lanes_f>& x = xs.x[static_cast<size_t>(g0 / kLanes)];
    // Parts past the group's last head hold no query and are skipped (SmolLM2's group of 3 is one
    // part of 8 with AVX2).
    for (int part = 0; part * kPartLanes < std::min(kLanes, xs.group - g0); ++part) {
      const int n = std::min(kPartLanes, xs.group - g0 - part * kPartLanes);
      const part_f inv = lane_softmax_part(x.data(), xs.n, part, e.data());
      for (int j = 0; j < n_cand; ++j) {
        const int lo = std::max(0, j - 3), hi = std::min(n_cand - 1, j + 3);
        part_f p = e[static_cast<size_t>(lo)];
        for (int k = lo + 1; k <= hi; ++k) {
          const part_f v = e[static_cast<size_t>(k)];
          p = p > v ? p : v;
        }
        p *= inv;
        double sum = 0;
        for (int r = 0; r < n; ++r) sum += p[r];
        score[j] += sum / xs.group;
      }
    }
  }
}

int rows_below(const KvHead& kh, int32_t pos) {
  return static_cast<int>(std::lower_bound(kh.pos.begin(), kh.pos.begin() + kh.n, pos) - kh.pos.begin());
}

namespace {

// Adds to sum[j] and sumsq[j], for the candidates j < n_cand <= n, the probabilities A (and A^2)
// of row j in the softmax over x[0..n) of each of the first `rows` lanes, summed over those lanes
// (in double), and returns their part of the entropy, -sum over the lanes and j < n_cand of
// A log A. log A is taken as (x_j - max) - log z, z the lane's softmax sum: no logarithm per
// entry (the float64 reference adds 1e-10 inside its logarithm, which moves the sum by at most
// 1e-10 an entry).
double add_window_rows(const lanes_f* x, int n, int rows, int n_cand, double* sum, double* sumsq) {
  thread_local std::vector<part_f> e;
  e.resize(static_cast<size_t>(n));
  double entropy = 0;
  for (int part = 0; part * kPartLanes < rows; ++part) {
    const int in_part = std::min(kPartLanes, rows - part * kPartLanes);
    const LaneSoftmax sm = lane_softmax(x, n, part, e.data());
    double s0[kPartLanes] = {}, s1[kPartLanes] = {};  // per lane: sum of A, and of A (x - max)
    for (int j = 0; j < n_cand; ++j) {
      const part_f a = e[static_cast<size_t>(j)] * sm.inv;
      const part_f ax = a > part_f{} ? a * (part_of<part_f>(x[j], part) - sm.ref) : part_f{};  // no 0 * -inf
      double t = 0, tt = 0;
      for (int r = 0; r < in_part; ++r) {
        const double ar = a[r];
        t += ar;
        tt += ar * ar;
        s0[r] += ar;
        s1[r] += ax[r];
      }
      sum[j] += t;
      sumsq[j] += tt;
    }
    for (int r = 0; r < in_part; ++r)
      if (sm.z[r] > 0.0f) entropy += std::log(static_cast<double>(sm.z[r])) * s0[r] - s1[r];
  }
  return entropy;
}

}  // namespace

int score_window_block(const float* q_window, int S, int n_obs, int i0, int h, const AttentionShape& s, const KvHead& kv,
                       float softcap, RowBlock& block, std::vector<lanes_f>& x) {
  const int rows = std::min(kLanes, n_obs - i0), d = s.head_dim;
  const float* qr[kLanes];
  int32_t pr[kLanes];
  for (int r = 0; r < rows; ++r) {
    qr[r] = q_window + (static_cast<size_t>(i0 + r) * s.n_heads + static_cast<size_t>(h)) * d;
    pr[r] = S - n_obs + i0 + r;
  }
  x.resize(static_cast<size_t>(rows_below(kv, pr[rows - 1] + 1)));
  block.begin(qr, pr, rows, d, softcap);
  block.scores(kv, static_cast<int>(x.size()), x.data());
  return rows;
}

LayerStats window_stats(const float* q_window, int S, int n_obs, int P, const KvCache& cache, int layer, const AttentionShape& s,
                        double gamma, TokenPool pool, ThreadPool& threads) {
  if (n_obs < 1 || P < 1 || P > S - n_obs) fail("internal: window_stats needs 0 < P <= S - n_obs");
  const int group = s.n_heads / s.n_kv_heads;
  std::vector<int> cand(static_cast<size_t>(s.n_kv_heads));  // per KV head: the rows below P
  for (int g = 0; g < s.n_kv_heads; ++g) cand[static_cast<size_t>(g)] = rows_below(cache.head(layer, g), P);
  std::vector<std::vector<double>> pooled(static_cast<size_t>(s.n_heads));
  std::vector<double> head_entropy(static_cast<size_t>(s.n_heads)), head_var(static_cast<size_t>(s.n_heads));
  threads.parallel_for(s.n_heads, 1, [&](int64_t hb, int64_t he, int) {
    thread_local RowBlock block;
    std::vector<lanes_f> x;  // 64 bytes a row: not kept past the call
    std::vector<double> sum, sumsq, I;
    for (int64_t h = hb; h < he; ++h) {
      const KvHead& kv = cache.head(layer, static_cast<int>(h) / group);
      const int Pr = cand[static_cast<size_t>(h / group)];
      sum.assign(static_cast<size_t>(Pr), 0.0);
      sumsq.assign(static_cast<size_t>(Pr), 0.0);
      I.resize(static_cast<size_t>(Pr));
      pooled[static_cast<size_t>(h)].resize(static_cast<size_t>(Pr));
      double entropy = 0;
      // The observing queries of head h, kLanes at a time (causal inside the window), each lane's
      // softmax row added.
      for (int i0 = 0; i0 < n_obs; i0 += kLanes) {
        const int rows = score_window_block(q_window, S, n_obs, i0, static_cast<int>(h), s, kv, s.softcap, block, x);
        entropy += add_window_rows(x.data(), static_cast<int>(x.size()), rows, Pr, sum.data(), sumsq.data());
      }
      double var_total = 0;
      for (int j = 0; j < Pr; ++j) {
        const double mean = sum[static_cast<size_t>(j)] / n_obs;
        const double var = n_obs > 1 ? std::max(0.0, (sumsq[static_cast<size_t>(j)] - n_obs * mean * mean) / (n_obs - 1)) : 0.0;
        I[static_cast<size_t>(j)] = mean + gamma * var;
        var_total += var;
      }
      pool_tokens(I.data(), Pr, pool, pooled[static_cast<size_t>(h)].data());
      head_entropy[static_cast<size_t>(h)] = entropy;
      head_var[static_cast<size_t>(h)] = var_total;
    }
  });
  LayerStats st;
  st.entropy = std::accumulate(head_entropy.begin(), head_entropy.end(), 0.0);
  st.variance = std::accumulate(head_var.begin(), head_var.end(), 0.0);
  st.indicator.resize(static_cast<size_t>(s.n_kv_heads));
  for (int g = 0; g < s.n_kv_heads; ++g) st.indicator[static_cast<size_t>(g)].assign(static_cast<size_t>(cand[static_cast<size_t>(g)]), 0.0f);
  for (int h = 0; h < s.n_heads; ++h)
    for (int j = 0; j < cand[static_cast<size_t>(h / group)]; ++j)
      st.indicator[static_cast<size_t>(h / group)][static_cast<size_t>(j)] +=
          static_cast<float>(pooled[static_cast<size_t>(h)][static_cast<size_t>(j)] / group);
  return st;
}

void accumulate_attention(const float* q, const int32_t* qpos, int n, const KvCache& cache, int layer,
                          const AttentionShape& s, std::vector<std::vector<double>>& acc, ThreadPool& threads, int64_t gain_budget) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  acc.resize(static_cast<size_t>(s.n_kv_heads));
  threads.parallel_for(s.n_kv_heads, 1, [&](int64_t gb, int64_t ge, int) {
    thread_local RowBlock block;
    thread_local std::vector<lanes_f> x;
    thread_local std::vector<double> sum;
    for (int64_t g = gb; g < ge; ++g) {
      const KvHead& kh = cache.head(layer, static_cast<int>(g));
      std::vector<double>& a = acc[static_cast<size_t>(g)];
      // Rows are only ever appended since the last call (and compacted together with acc).
      if (a.size() > static_cast<size_t>(kh.n)) fail("internal: accumulated attention is out of step with the cache");
      a.resize(static_cast<size_t>(kh.n), 0.0);
      sum.assign(static_cast<size_t>(kh.n), 0.0);
      // The (query, head) pairs of this KV head, query-major, kLanes at a time: one block of
      // lanes scores every key at once (RowBlock::scores, causal), and each lane's softmax row
      // is added to the sums.
      const int64_t pairs = static_cast<int64_t>(n) * group;
      const float* qr[kLanes];
      int32_t pr[kLanes];
      lanes_f gain = splat(1.0f);
      for (int64_t i0 = 0; i0 < pairs; i0 += kLanes) {
        const int rows = static_cast<int>(std::min<int64_t>(kLanes, pairs - i0));
        int32_t last = 0;
        for (int r = 0; r < rows; ++r) {
          const int64_t t = (i0 + r) / group, h = (i0 + r) % group;
          qr[r] = q + (static_cast<size_t>(t) * s.n_heads + static_cast<size_t>(g * group + h)) * d;
          pr[r] = qpos[t];
          last = std::max(last, pr[r]);
          gain[r] = static_cast<float>(step_gain(static_cast<int64_t>(pr[r]) + 1, gain_budget));
        }
        // Rows hold increasing positions from 0, so row j's position is at least j: no row from
        // the block's last position + 1 on is visible to any of its queries.
        const int n_keys = static_cast<int>(std::min<int64_t>(kh.n, static_cast<int64_t>(last) + 1));
        x.resize(static_cast<size_t>(n_keys));
        block.begin(qr, pr, rows, d, s.softcap);
        block.scores(kh, n_keys, x.data());
        add_lane_softmax(x.data(), n_keys, rows, n_keys, sum.data(), gain_budget > 0 ? &gain : nullptr);
      }
      // Summed over the group's heads; H2O adds their mean.
      for (int j = 0; j < kh.n; ++j) a[static_cast<size_t>(j)] += sum[static_cast<size_t>(j)] / group;
    }
  });
}

void decode_attention_row(const DecodeRowScores& xs, double gain, double* row) {
  std::fill(row, row + xs.n, 0.0);
  const lanes_f g = splat(static_cast<float>(gain));
  for (int g0 = 0; g0 < xs.group; g0 += kLanes)
    add_lane_softmax(xs.x[static_cast<size_t>(g0 / kLanes)].data(), xs.n, std::min(kLanes, xs.group - g0), xs.n, row,
                     gain != 1.0 ? &g : nullptr);
  for (int j = 0; j < xs.n; ++j) row[j] /= xs.group;
}

namespace {
template <typename T>
std::vector<char> top_k(const T* score, int n, int64_t keep) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  std::vector<char> flags(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < std::min<int64_t>(keep, n); ++i) flags[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
  return flags;
}
}  // namespace

std::vector<char> top_k_flags(const float* score, int n, int64_t keep) { return top_k(score, n, keep); }
std::vector<char> top_k_flags(const double* score, int n, int64_t keep) { return top_k(score, n, keep); }

}  // namespace slake
