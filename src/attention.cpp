#include "slake/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
  const int group = s.n_heads / s.n_kv_heads;
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * s.head_dim;
  pool.parallel_for(static_cast<int64_t>(n_tokens) * s.n_heads, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t t = w / s.n_heads;
      const int h = static_cast<int>(w % s.n_heads);
      const KvHead& kv = cache.head(layer, h / group);
      float* o = out + t * qdim + static_cast<int64_t>(h) * s.head_dim;
      const float* qh = q + t * qdim + static_cast<int64_t>(h) * s.head_dim;
      if (kv.lin.n > 0) ptaa_one(o, qh, qpos[t], kv, kv.lin, s.head_dim, s.sliding_window);
      else attention_one(o, qh, qpos[t], kv, s.head_dim, s.sliding_window);
    }
  });
}

}  // namespace slake
