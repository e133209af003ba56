// Prefill attention: a block per (tile of query tokens, KV head) holds the query rows of all the
// KV head's G query heads (GQA: each key/value tile is loaded into shared memory once for all of
// them), streams the head's keys in tiles with an online softmax, and ends with the Taylor term of
// the linear state, or its centroids (as ptaa_decode's merge), when that state holds anything. One warp owns every
// kPrefillWarps-th query row; lanes own head dimensions lane, lane + 32, ...
// (fp32 CUDA cores; a tensor-core (mma) path for the QK^T and PV products is not written yet.)
#pragma once
#include "common.cuh"
#include "ptaa_decode.cuh"

namespace slake::gpu {

constexpr int kPrefillThreads = 128;
constexpr int kPrefillWarps = kPrefillThreads / 32;
constexpr int kPrefillRows = 32;  // query rows (tokens x group heads) per block, at most
constexpr int kPrefillRowsPerWarp = kPrefillRows / kPrefillWarps;
constexpr int kPrefillKeyTile = 16;

inline __host__ __device__ int prefill_tokens_per_block(int group) { return group >= kPrefillRows ? 1 : kPrefillRows / group; }
inline size_t prefill_smem_bytes(int head_dim) {
  return sizeof(float) * static_cast<size_t>(head_dim) * (kPrefillRows + 2 * kPrefillKeyTile);
}

__global__ void prefill_attention_kernel(float* out, int64_t out_stride, const float* q, int64_t q_stride, const int32_t* qpos,
                                         int n_q, int n_heads, KvLayerView kv, LinearStateView lin, int window) {
  SLAKE_DYNAMIC_SHARED(float, smem);
  const int d = kv.head_dim, g = static_cast<int>(blockIdx.y), group = n_heads / kv.n_kv_heads;
  const int tokens = prefill_tokens_per_block(group), t0 = static_cast<int>(blockIdx.x) * tokens;
  const int rows = min(tokens, n_q - t0) * group;  // row r: token t0 + r / group, head g * group + r % group
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  float* qs = smem;                          // [kPrefillRows][d]
  float* ks = qs + kPrefillRows * d;         // [kPrefillKeyTile][d]
  float* vs = ks + kPrefillKeyTile * d;      // [kPrefillKeyTile][d]
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  for (int e = static_cast<int>(threadIdx.x); e < rows * d; e += kPrefillThreads) {
    const int r = e / d, i = e % d;
    qs[e] = q[static_cast<int64_t>(t0 + r / group) * q_stride + static_cast<int64_t>(g * group + r % group) * d + i];
  }
  int32_t qmin = qpos[t0], qmax = qpos[t0];
  for (int t = 1; t < rows / group; ++t) qmin = min(qmin, qpos[t0 + t]), qmax = max(qmax, qpos[t0 + t]);

  float m[kPrefillRowsPerWarp], l[kPrefillRowsPerWarp], acc[kPrefillRowsPerWarp][kPtaaLaneDims];
  for (int a = 0; a < kPrefillRowsPerWarp; ++a) {
    m[a] = -INFINITY, l[a] = 0.0f;
    for (int c = 0; c < kPtaaLaneDims; ++c) acc[a][c] = 0.0f;
  }
  const int n = kv.n_held[g];
  const int32_t* ph = kv.pos + static_cast<int64_t>(g) * kv.capacity;
  for (int j0 = 0; j0 < n; j0 += kPrefillKeyTile) {
    const int tile = min(kPrefillKeyTile, n - j0);
    // Positions need not increase along the rows (a prompt chunk's recalled rows follow its own:
    // DeviceContext::attend_chunk_recalled), so a tile is skipped by its own least and greatest.
    int32_t kmin = ph[j0], kmax = ph[j0];
    for (int jj = 1; jj < tile; ++jj) kmin = min(kmin, ph[j0 + jj]), kmax = max(kmax, ph[j0 + jj]);
    if (kmin > qmax) continue;                            // no key of the tile is visible to this block
    if (window > 0 && kmax <= qmin - window) continue;  // the whole tile left every window
    __syncthreads();  // the previous tile is no longer read
    for (int e = static_cast<int>(threadIdx.x); e < tile * d; e += kPrefillThreads) {  // stored rows to fp32
      ks[e] = kv_elem(kv.type_k, kv.krow(g, j0 + e / d), e % d);
      vs[e] = kv_elem(kv.type_v, kv.vrow(g, j0 + e / d), e % d);
    }
    __syncthreads();
    for (int a = 0; a < kPrefillRowsPerWarp; ++a) {
      const int r = warp + a * kPrefillWarps;
      if (r >= rows) break;  // warp-uniform
      const int32_t p = qpos[t0 + r / group];
      for (int jj = 0; jj < tile; ++jj) {
        const int32_t kp = ph[j0 + jj];
        if (!(kp <= p && (window <= 0 || kp > p - window))) continue;
        float dot = 0.0f;
        for (int i = lane; i < d; i += 32) dot += qs[r * d + i] * ks[jj * d + i];
        const float x = cap_logit(warp_sum(dot) * scale, kv.softcap);
        const float m_new = fmaxf(m[a], x);
        const float corr = expf(m[a] - m_new), pr = expf(x - m_new);
        l[a] = l[a] * corr + pr;
        for (int c = 0; c < kPtaaLaneDims; ++c) {
          const int i = lane + 32 * c;
          if (i < d) acc[a][c] = acc[a][c] * corr + pr * vs[jj * d + i];
        }
        m[a] = m_new;
      }
    }
  }

  const float n_lin = lin.n ? lin.n[g] : 0.0f;
  const bool cent = lin.centroids > 0 && n_lin > 0.0f, taylor = lin.centroids == 0 && n_lin > 0.0f;
  const int K = lin.centroids;
  const float* cn = cent ? lin.cn + static_cast<int64_t>(g) * K : nullptr;
  for (int a = 0; a < kPrefillRowsPerWarp; ++a) {
    const int r = warp + a * kPrefillWarps;
    if (r >= rows) break;
    const float* qr = qs + r * d;
    float mu = 0.0f, xbar = 0.0f, slope = 1.0f, mstar = m[a];  // mu = cap_logit(xbar), slope its derivative
    if (cent)
      for (int c = 0; c < K; ++c)
        if (cn[c] != 0.0f) mstar = fmaxf(mstar, cap_logit(centroid_logit_warp(qr, lin, g, c, d, scale), kv.softcap));
    if (taylor) {
      float dot = 0.0f;
      for (int i = lane; i < d; i += 32) dot += qr[i] * lin.ksum[static_cast<int64_t>(g) * d + i];
      xbar = warp_sum(dot) * scale / n_lin;
      mu = cap_logit(xbar, kv.softcap);
      slope = cap_slope(xbar, kv.softcap);
      mstar = fmaxf(mstar, mu);
    }
    float* o = out + static_cast<int64_t>(t0 + r / group) * out_stride + static_cast<int64_t>(g * group + r % group) * d;
    if (mstar == -INFINITY) {
      for (int i = lane; i < d; i += 32) o[i] = 0.0f;
      continue;
    }
    const float corr = m[a] == -INFINITY ? 0.0f : expf(m[a] - mstar);
    const float lam = taylor ? expf(mu - mstar) : 0.0f;
    float den = l[a] * corr + lam * n_lin;
    float cacc[kPtaaLaneDims];  // the centroids' share of the numerator, per lane dimension
    for (int c = 0; c < kPtaaLaneDims; ++c) cacc[c] = 0.0f;
    if (cent) {
      for (int k = 0; k < K; ++k) {
        if (cn[k] == 0.0f) continue;
        const float w = expf(cap_logit(centroid_logit_warp(qr, lin, g, k, d, scale), kv.softcap) - mstar);
        den += w * cn[k];
        const float* cv = lin.cv + (static_cast<int64_t>(g) * K + k) * d;
        for (int c = 0; c < kPtaaLaneDims; ++c)
          if (lane + 32 * c < d) cacc[c] += w * cv[lane + 32 * c];
      }
    }
    const float* M = lin.M + static_cast<int64_t>(g) * d * d;
    for (int c = 0; c < kPtaaLaneDims; ++c) {
      const int i = lane + 32 * c;
      if (i >= d) break;
      float num = acc[a][c] * corr + cacc[c];
      if (taylor) {
        float qm = 0.0f;
        for (int k = 0; k < d; ++k) qm += qr[k] * M[static_cast<int64_t>(k) * d + i];
        num += lam * ((1.0f - slope * xbar) * lin.vsum[static_cast<int64_t>(g) * d + i] + slope * scale * qm);
      }
      o[i] = num / den;
    }
  }
}

void prefill_attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, const int32_t* qpos, int n_q,
                       int n_heads, const KvLayerView& kv, const LinearStateView& lin, int sliding_window, Stream stream) {
  if (kv.head_dim <= 0 || kv.head_dim > kMaxHeadDim || n_heads % kv.n_kv_heads != 0 || n_heads / kv.n_kv_heads > kPrefillRows)
    throw Error("prefill_attention: unsupported shape");
  if (n_q <= 0) return;
  const int tokens = prefill_tokens_per_block(n_heads / kv.n_kv_heads);
  const size_t smem = prefill_smem_bytes(kv.head_dim);
#if !SLAKE_EMULATED
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(prefill_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
#endif
  const dim3 grid(static_cast<unsigned>(ceil_div(n_q, tokens)), static_cast<unsigned>(kv.n_kv_heads));
  SLAKE_LAUNCH(grid, dim3(kPrefillThreads), smem, stream, prefill_attention_kernel)
  (out, out_stride, q, q_stride, qpos, n_q, n_heads, kv, lin, sliding_window);
  SLAKE_CHECK_LAUNCH("prefill_attention_kernel");
}

}  // namespace slake::gpu
