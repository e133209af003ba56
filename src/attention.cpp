#include "slake/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "slake/attention_rows.h"
#include "slake/ops.h"
#include "slake/ptaa.h"

namespace slake {

namespace {
constexpr int kTile = 64;
}

void attention_one(float* out, const float* q, int32_t qpos, const KvHead& kv, int d, int window) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  std::fill(out, out + d, 0.0f);
  float score[kTile];
  int idx[kTile];
  for (int j0 = 0; j0 < kv.n; j0 += kTile) {
    const int j1 = std::min(kv.n, j0 + kTile);
    int cnt = 0;
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int j = j0; j < j1; ++j) {
      if (!key_visible(kv.pos[static_cast<size_t>(j)], qpos, window)) continue;
      const float x = dot_f32(q, kv.key(j, d), d) * scale;
      score[cnt] = x;
      idx[cnt++] = j;
      tile_max = std::max(tile_max, x);
    }
    if (cnt == 0) continue;
    const float m_new = std::max(m, tile_max);
    const float corr = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
    l *= corr;
    for (int i = 0; i < d; ++i) out[i] *= corr;
    for (int c = 0; c < cnt; ++c) {
      const float p = std::exp(score[c] - m_new);
      l += p;
      axpy_f32(p, kv.value(idx[c], d), out, d);
    }
    m = m_new;
  }
  if (l > 0.0f) {
    const float inv = 1.0f / l;
    for (int i = 0; i < d; ++i) out[i] *= inv;
  }
}

void attention_prefill(float* out, const float* q, const int32_t* qpos, int n_tokens, const KvCache& cache, int layer,
                       const AttentionShape& s, ThreadPool& pool) {
  // Work items are blocks of kLanes query rows of one KV head: row r is token r / group, query
  // head kvh * group + r % group, so a block holds whole GQA groups of neighbouring tokens.
  const int group = s.n_heads / s.n_kv_heads, d = s.head_dim;
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * d;
  const int64_t rows = static_cast<int64_t>(n_tokens) * group;
  const int64_t blocks = (rows + kLanes - 1) / kLanes;
  pool.parallel_for(blocks * s.n_kv_heads, 1, [&](int64_t b, int64_t e, int) {
    thread_local std::vector<float> acc;
    acc.resize(static_cast<size_t>(kLanes) * d);
    const float* qr[kLanes];
    int32_t pr[kLanes];
    float* outr[kLanes];
    float m[kLanes], l[kLanes];
    for (int64_t w = b; w < e; ++w) {
      const int kvh = static_cast<int>(w / blocks);
      const int64_t r0 = (w % blocks) * kLanes;
      const int n = static_cast<int>(std::min<int64_t>(kLanes, rows - r0));
      for (int i = 0; i < n; ++i) {
        const int64_t t = (r0 + i) / group;
        const int64_t off = t * qdim + static_cast<int64_t>(kvh * group + (r0 + i) % group) * d;
        qr[i] = q + off;
        outr[i] = out + off;
        pr[i] = qpos[t];
      }
      const KvHead& kv = cache.head(layer, kvh);
      attend_rows(qr, pr, n, kv, d, s.sliding_window, acc.data(), m, l);
      for (int i = 0; i < n; ++i) ptaa_finish(outr[i], qr[i], m[i], l[i], acc.data() + static_cast<size_t>(i) * d, kv.lin, d);
    }
  });
}

}  // namespace slake
