#include "slake/attention_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "slake/error.h"

namespace slake {

namespace {
constexpr int kKeys = 16;  // keys per tile: one score register each
constexpr int kDims = 8;   // value dimensions per register block in the P V product

// s[j] = sum_i q_t[i] * k[j][i]: the scores of kKeys keys, one independent chain each.
inline void score_tile(const lanes_f* q_t, const float* const* k, int d, lanes_f* s) {
  for (int j = 0; j < kKeys; ++j) s[j] = lanes_f{};
  for (int i = 0; i < d; ++i) {
    const lanes_f qi = q_t[i];
    for (int j = 0; j < kKeys; ++j) s[j] += qi * k[j][i];
  }
}

// acc_t[i] += sum_j p[j] * v[j][i] for i in [i0, i0 + W): W independent accumulator chains.
template <int W>
inline void pv_block(lanes_f* acc_t, const lanes_f* p, const float* const* v, int i0) {
  lanes_f o[W];
  for (int w = 0; w < W; ++w) o[w] = acc_t[i0 + w];
  for (int j = 0; j < kKeys; ++j)
    for (int w = 0; w < W; ++w) o[w] += p[j] * v[j][i0 + w];
  for (int w = 0; w < W; ++w) acc_t[i0 + w] = o[w];
}
}  // namespace

void RowBlock::begin(const float* const* q, const int32_t* qpos, int n, int d) {
  if (n < 1 || n > kLanes) fail("attend_rows: " + std::to_string(n) + " rows, want 1.." + std::to_string(kLanes));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  n_ = n;
  d_ = d;
  q_t_.assign(static_cast<size_t>(d), lanes_f{});
  acc_t_.assign(static_cast<size_t>(d), lanes_f{});
  m_ = splat(-std::numeric_limits<float>::infinity());
  l_ = lanes_f{};
  qp_ = splat_i(-1);  // a missing row sees nothing: every key position is >= 0
  q_min_ = std::numeric_limits<int32_t>::max();
  q_max_ = -1;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < d; ++i) q_t_[static_cast<size_t>(i)][r] = q[r][i] * scale;
    qp_[r] = qpos[r];
    q_min_ = std::min(q_min_, qpos[r]);
    q_max_ = std::max(q_max_, qpos[r]);
  }
}

std::pair<int, int> RowBlock::key_range(const KvHead& kv, int window) const {
  // Positions are sorted, so the keys any row can see are one range.
  const int32_t* kpos = kv.pos.data();
  const int end = static_cast<int>(std::upper_bound(kpos, kpos + kv.n, q_max_) - kpos);
  const int begin = window > 0 ? static_cast<int>(std::upper_bound(kpos, kpos + end, q_min_ - window) - kpos) : 0;
  return {begin, end};
}

void RowBlock::attend(const KvHead& kv, int window, int j_begin, int j_end) {
  const int d = d_;
  const int32_t* kpos = kv.pos.data();
  const lanes_f neg_inf = splat(-std::numeric_limits<float>::infinity());
  for (int j0 = j_begin; j0 < j_end; j0 += kKeys) {
    const int nk = std::min(kKeys, j_end - j0);
    const float* k[kKeys];
    const float* v[kKeys];
    for (int j = 0; j < kKeys; ++j) {  // a short last tile repeats its last key, masked below
      const int idx = j0 + std::min(j, nk - 1);
      k[j] = kv.key(idx, d);
      v[j] = kv.value(idx, d);
    }

    lanes_f s[kKeys];
    score_tile(q_t_.data(), k, d, s);
    // Masking is needed only where some row cannot see some key of the tile.
    const bool all_visible =
        nk == kKeys && kpos[j0 + nk - 1] <= q_min_ && (window <= 0 || kpos[j0] > q_max_ - window);
    if (!all_visible)
      for (int j = 0; j < kKeys; ++j) {
        if (j >= nk) {
          s[j] = neg_inf;
          continue;
        }
        const lanes_i kp = splat_i(kpos[j0 + j]);
        const lanes_i seen = window > 0 ? ((kp <= qp_) & (kp > qp_ - window)) : (kp <= qp_);
        s[j] = seen ? s[j] : neg_inf;
      }

    lanes_f tile_max = s[0];
    for (int j = 1; j < kKeys; ++j) tile_max = lanes_max(tile_max, s[j]);
    const lanes_f m_new = lanes_max(m_, tile_max);
    // A row that has seen nothing yet keeps m = -inf; measure it from 0 so no -inf - -inf appears.
    const lanes_f ref = m_new == neg_inf ? lanes_f{} : m_new;
    const lanes_i grew = m_new > m_;
    bool any_grew = false;
    for (int r = 0; r < kLanes; ++r) any_grew |= grew[r] != 0;
    if (any_grew) {
      const lanes_f corr = lanes_exp(m_ - ref);
      l_ *= corr;
      for (int i = 0; i < d; ++i) acc_t_[static_cast<size_t>(i)] *= corr;
    }
    m_ = m_new;

    lanes_f p[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      p[j] = lanes_exp(s[j] - ref);
      l_ += p[j];
    }
    int i0 = 0;
    for (; i0 + kDims <= d; i0 += kDims) pv_block<kDims>(acc_t_.data(), p, v, i0);
    for (; i0 < d; ++i0) pv_block<1>(acc_t_.data(), p, v, i0);
  }
}

void RowBlock::scores(const KvHead& kv, int n_keys, lanes_f* x) const {
  const lanes_f neg_inf = splat(-std::numeric_limits<float>::infinity());
  for (int j0 = 0; j0 < n_keys; j0 += kKeys) {
    const int nk = std::min(kKeys, n_keys - j0);
    const float* k[kKeys];
    for (int j = 0; j < kKeys; ++j) k[j] = kv.key(j0 + std::min(j, nk - 1), d_);
    lanes_f s[kKeys];
    score_tile(q_t_.data(), k, d_, s);
    for (int j = 0; j < nk; ++j) x[j0 + j] = (splat_i(kv.pos[static_cast<size_t>(j0 + j)]) <= qp_) ? s[j] : neg_inf;
  }
}

void RowBlock::finish(float* acc, float* m, float* l) const {
  for (int r = 0; r < n_; ++r) {
    m[r] = m_[r];
    l[r] = l_[r];
    for (int i = 0; i < d_; ++i) acc[static_cast<size_t>(r) * d_ + i] = acc_t_[static_cast<size_t>(i)][r];
  }
}

void attend_rows(const float* const* q, const int32_t* qpos, int n, const KvHead& kv, int d, int window, float* acc,
                 float* m, float* l) {
  thread_local RowBlock block;
  block.begin(q, qpos, n, d);
  const auto [j_begin, j_end] = block.key_range(kv, window);
  block.attend(kv, window, j_begin, j_end);
  block.finish(acc, m, l);
}

}  // namespace slake
