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

void attend_rows(const float* const* q, const int32_t* qpos, int n, const KvHead& kv, int d, int window, float* acc,
                 float* m_out, float* l_out) {
  if (n < 1 || n > kLanes) fail("attend_rows: " + std::to_string(n) + " rows, want 1.." + std::to_string(kLanes));
  const float inf = std::numeric_limits<float>::infinity();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  // Transposed, pre-scaled queries and accumulators: element i of every row in one vector.
  thread_local std::vector<lanes_f> q_t, acc_t;
  q_t.assign(static_cast<size_t>(d), lanes_f{});
  acc_t.assign(static_cast<size_t>(d), lanes_f{});
  lanes_i qp = splat_i(-1);  // a missing row sees nothing: every key position is >= 0
  int32_t q_min = std::numeric_limits<int32_t>::max(), q_max = -1;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < d; ++i) q_t[static_cast<size_t>(i)][r] = q[r][i] * scale;
    qp[r] = qpos[r];
    q_min = std::min(q_min, qpos[r]);
    q_max = std::max(q_max, qpos[r]);
  }

  // The keys any row can see: positions are sorted, so that is one range.
  const int32_t* kpos = kv.pos.data();
  const int j_end = static_cast<int>(std::upper_bound(kpos, kpos + kv.n, q_max) - kpos);
  const int j_begin = window > 0 ? static_cast<int>(std::upper_bound(kpos, kpos + j_end, q_min - window) - kpos) : 0;

  const lanes_f neg_inf = splat(-inf);
  lanes_f m = neg_inf, l{};
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
    for (int j = 0; j < kKeys; ++j) s[j] = lanes_f{};
    for (int i = 0; i < d; ++i) {
      const lanes_f qi = q_t[static_cast<size_t>(i)];
      for (int j = 0; j < kKeys; ++j) s[j] += qi * k[j][i];
    }
    // Masking is needed only where some row cannot see some key of the tile.
    const bool all_visible =
        nk == kKeys && kpos[j0 + nk - 1] <= q_min && (window <= 0 || kpos[j0] > q_max - window);
    if (!all_visible)
      for (int j = 0; j < kKeys; ++j) {
        if (j >= nk) {
          s[j] = neg_inf;
          continue;
        }
        const lanes_i kp = splat_i(kpos[j0 + j]);
        const lanes_i seen = window > 0 ? ((kp <= qp) & (kp > qp - window)) : (kp <= qp);
        s[j] = seen ? s[j] : neg_inf;
      }

    lanes_f tile_max = s[0];
    for (int j = 1; j < kKeys; ++j) tile_max = lanes_max(tile_max, s[j]);
    const lanes_f m_new = lanes_max(m, tile_max);
    // A row that has seen nothing yet keeps m = -inf; measure it from 0 so no -inf - -inf appears.
    const lanes_f ref = m_new == neg_inf ? lanes_f{} : m_new;
    const lanes_i grew = m_new > m;
    bool any_grew = false;
    for (int r = 0; r < kLanes; ++r) any_grew |= grew[r] != 0;
    if (any_grew) {
      const lanes_f corr = lanes_exp(m - ref);
      l *= corr;
      for (int i = 0; i < d; ++i) acc_t[static_cast<size_t>(i)] *= corr;
    }
    m = m_new;

    lanes_f p[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      p[j] = lanes_exp(s[j] - ref);
      l += p[j];
    }
    int i0 = 0;
    for (; i0 + kDims <= d; i0 += kDims) pv_block<kDims>(acc_t.data(), p, v, i0);
    for (; i0 < d; ++i0) pv_block<1>(acc_t.data(), p, v, i0);
  }

  for (int r = 0; r < n; ++r) {
    m_out[r] = m[r];
    l_out[r] = l[r];
    for (int i = 0; i < d; ++i) acc[static_cast<size_t>(r) * d + i] = acc_t[static_cast<size_t>(i)][r];
  }
}

}  // namespace slake
