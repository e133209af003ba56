// The centroid compensator on the device (slake::LinearState in centroid mode, `--kv-compensate
// centroids`): each evicted row joins the first unseeded centroid, else the one whose mean key is
// nearest (L2, the lowest index on ties), in the order the rows are evicted; attention then sees
// each seeded centroid c as cn[c] tokens at the mean key ck[c] / cn[c] with value sum cv[c]
// (slake::ptaa_finish). Absorption is sequential per KV head (a row's centroid depends on the rows
// before it): one block per head, threads over the centroids for the distances and over the
// dimensions for the sums.
#pragma once
#include "common.cuh"

namespace slake::gpu {

constexpr int kCentroidThreads = 128;

// Block per KV head g: absorbs rows idx[g * idx_ld + t], t < count[g] (count null: one row,
// idx[g], when it is >= 0), read as stored, in that order.
__global__ void centroid_absorb_kernel(LinearStateView lin, KvLayerView kv, const int32_t* idx, int64_t idx_ld,
                                       const int32_t* count) {
  SLAKE_SHARED(float, kbuf, kMaxHeadDim);
  SLAKE_SHARED(float, vbuf, kMaxHeadDim);
  SLAKE_SHARED(float, best_dist, kCentroidThreads);
  SLAKE_SHARED(int, best_c, kCentroidThreads);
  SLAKE_SHARED(int, chosen, 1);
  const int g = static_cast<int>(blockIdx.x), d = kv.head_dim, K = lin.centroids, tid = static_cast<int>(threadIdx.x);
  const int nt = static_cast<int>(blockDim.x);
  const int32_t* rows = idx + g * idx_ld;
  const int n = count ? count[g] : (rows[0] >= 0 ? 1 : 0);
  float* cn = lin.cn + static_cast<int64_t>(g) * K;
  float* ck = lin.ck + static_cast<int64_t>(g) * K * d;
  float* cv = lin.cv + static_cast<int64_t>(g) * K * d;
  for (int t = 0; t < n; ++t) {
    for (int i = tid; i < d; i += nt) {
      kbuf[i] = kv_elem(kv.type_k, kv.krow(g, rows[t]), i);
      vbuf[i] = kv_elem(kv.type_v, kv.vrow(g, rows[t]), i);
    }
    __syncthreads();
    // Each thread's best among its centroids (ascending, so ties keep the lowest index); an
    // unseeded centroid wins over every seeded one, encoded as distance -1.
    float bd = INFINITY;
    int bc = -1;
    for (int c = tid; c < K; c += nt) {
      float dist = -1.0f;
      if (cn[c] != 0.0f) {
        const float inv = 1.0f / cn[c];
        dist = 0.0f;
        for (int i = 0; i < d; ++i) {
          const float x = ck[static_cast<int64_t>(c) * d + i] * inv - kbuf[i];
          dist += x * x;
        }
      }
      if (bc < 0 || dist < bd) bd = dist, bc = c;
      if (dist < 0.0f) break;  // the first unseeded centroid of this thread
    }
    best_dist[tid] = bd, best_c[tid] = bc;
    __syncthreads();
    if (tid == 0) {
      float d0 = INFINITY;
      int c0 = 0;
      for (int s = 0; s < nt; ++s) {
        const int c = best_c[s];
        if (c < 0) continue;
        const float ds = best_dist[s];
        const bool better = ds < 0.0f ? (d0 >= 0.0f || c < c0) : (d0 >= 0.0f && (ds < d0 || (ds == d0 && c < c0)));
        if (better) d0 = ds, c0 = c;
      }
      chosen[0] = c0;
      cn[c0] += 1.0f;
      lin.n[g] += 1.0f;
    }
    __syncthreads();
    const int c = chosen[0];
    for (int i = tid; i < d; i += nt) {
      ck[static_cast<int64_t>(c) * d + i] += kbuf[i];
      cv[static_cast<int64_t>(c) * d + i] += vbuf[i];
    }
    __syncthreads();  // the next row reads the updated centroid
  }
}

void centroid_absorb_rows(const LinearStateView& lin, const KvLayerView& kv, const int32_t* idx, int64_t idx_ld,
                          const int32_t* count, Stream stream) {
  if (lin.centroids <= 0 || kv.head_dim > kMaxHeadDim) throw Error("centroid_absorb_rows: no centroid state");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(kv.n_kv_heads)), dim3(kCentroidThreads), 0, stream, centroid_absorb_kernel)
  (lin, kv, idx, idx_ld, count);
  SLAKE_CHECK_LAUNCH("centroid_absorb_kernel");
}

void centroid_absorb_one(const LinearStateView& lin, const KvLayerView& kv, const int32_t* row, Stream stream) {
  centroid_absorb_rows(lin, kv, row, 1, nullptr, stream);
}

// The logit of seeded centroid c of head g for query q (any memory), summed by a warp: q . ck[c]
// / sqrt(d) / cn[c], as slake::ptaa_finish. Every lane of the warp gets it.
__device__ __forceinline__ float centroid_logit_warp(const float* q, const LinearStateView& lin, int g, int c, int d, float scale) {
  const float* k = lin.ck + (static_cast<int64_t>(g) * lin.centroids + c) * d;
  float dot = 0.0f;
  for (int i = static_cast<int>(threadIdx.x) % 32; i < d; i += 32) dot += q[i] * k[i];
  return warp_sum(dot) * scale / lin.cn[static_cast<int64_t>(g) * lin.centroids + c];
}

// The same by one thread alone.
__device__ __forceinline__ float centroid_logit(const float* q, const LinearStateView& lin, int g, int c, int d, float scale) {
  const float* k = lin.ck + (static_cast<int64_t>(g) * lin.centroids + c) * d;
  float dot = 0.0f;
  for (int i = 0; i < d; ++i) dot += q[i] * k[i];
  return dot * scale / lin.cn[static_cast<int64_t>(g) * lin.centroids + c];
}

}  // namespace slake::gpu
