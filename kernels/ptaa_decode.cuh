// PTAA decode (docs/algorithm.md §4, src/kv/ptaa.cpp), flash-decoding style: the retained tokens of a
// KV head are split into chunks of split_len, and the pages it recalls from its store (RecallView,
// recall.cuh) into chunks of about as many rows, one block per (chunk, query head) computing an
// online-softmax partial; a merge block per query head combines the partials with the Taylor term
// of the linear state:
//   m* = max(max_s m_s, mu),  mu = q . ksum / (n sqrt d),  lam = exp(mu - m*)
//   den = sum_s l_s exp(m_s - m*) + lam n
//   num = sum_s acc_s exp(m_s - m*) + lam ((1 - mu) vsum + q^T M / sqrt d)
// or, for a centroid state, the seeded centroids as cn[c] tokens of logit x_c (centroids.cuh):
//   m* = max(max_s m_s, max_c x_c),  den += sum_c exp(x_c - m*) cn[c],  num += sum_c exp(x_c - m*) cv[c]
#pragma once
#include "centroids.cuh"
#include "common.cuh"

namespace slake::gpu {

constexpr int kPtaaThreads = 128;
constexpr int kPtaaWarps = kPtaaThreads / 32;
constexpr int kPtaaLaneDims = kMaxHeadDim / 32;  // head dimensions each lane owns

__device__ __forceinline__ bool key_visible_dev(int32_t key_pos, int32_t qpos, int window) {
  return key_pos <= qpos && (window <= 0 || key_pos > qpos - window);
}

// Scratch layout: part_m [n_heads][n_splits], part_l [n_heads][n_splits], part_acc [n_heads][n_splits][d].
// Splits s < exact_splits cover the exact cache's rows (split_len each); the others, with a recall
// store, `rc.pages_per_split` of the pages each KV head chose (RecallView): gridDim.x = n_splits.
__global__ void ptaa_split_kernel(float* scratch, const float* q, int32_t qpos, int n_heads, KvLayerView kv, int window,
                                  int split_len, int exact_splits, RecallView rc) {
  SLAKE_SHARED(float, qs, kMaxHeadDim);
  SLAKE_SHARED(float, wm, kPtaaWarps);
  SLAKE_SHARED(float, wl, kPtaaWarps);
  SLAKE_SHARED(float, wacc, kPtaaWarps * kMaxHeadDim);
  const int d = kv.head_dim, s = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const int n_splits = static_cast<int>(gridDim.x);
  const int g = h / (n_heads / kv.n_kv_heads);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  for (int i = static_cast<int>(threadIdx.x); i < d; i += kPtaaThreads) qs[i] = q[static_cast<int64_t>(h) * d + i];
  __syncthreads();

  // The rows of this split: rows [j0, j1) of the exact cache, or slots [j0, j1) of the chosen
  // pages (slot f: row f % page of page list entry f / page; a page's rows past its store's end are
  // skipped).
  const bool recall = s >= exact_splits;
  const KvLayerView& src = recall ? rc.store : kv;
  int j0, j1;
  if (!recall) {
    j0 = s * split_len, j1 = min(kv.n_held[g], j0 + split_len);
  } else {
    const int first = (s - exact_splits) * rc.pages_per_split;
    j0 = first * rc.page, j1 = min(rc.n_chosen[g], first + rc.pages_per_split) * rc.page;
  }
  const int32_t* ph = src.pos + static_cast<int64_t>(g) * src.capacity;
  float m = -INFINITY, l = 0.0f, acc[kPtaaLaneDims];
  for (int c = 0; c < kPtaaLaneDims; ++c) acc[c] = 0.0f;
  for (int f = j0 + warp; f < j1; f += kPtaaWarps) {  // warp-uniform loop: every lane takes part
    int j = f;
    if (recall) {
      j = rc.pages[static_cast<int64_t>(g) * rc.pages_ld + f / rc.page] * rc.page + f % rc.page;
      if (j >= rc.store.n_held[g]) continue;
    }
    if (!key_visible_dev(ph[j], qpos, window)) continue;
    const uint8_t* kj = src.krow(g, j);
    float dot = 0.0f;
    for (int i = lane; i < d; i += 32) dot += qs[i] * kv_elem(src.type_k, kj, i);
    const float x = cap_logit(warp_sum(dot) * scale, kv.softcap);
    const float m_new = fmaxf(m, x);
    const float corr = expf(m - m_new), p = expf(x - m_new);
    l = l * corr + p;
    const uint8_t* vj = src.vrow(g, j);
    for (int c = 0; c < kPtaaLaneDims; ++c) {
      const int i = lane + 32 * c;
      if (i < d) acc[c] = acc[c] * corr + p * kv_elem(src.type_v, vj, i);
    }
    m = m_new;
  }
  if (lane == 0) wm[warp] = m, wl[warp] = l;
  for (int c = 0; c < kPtaaLaneDims; ++c) {
    const int i = lane + 32 * c;
    if (i < d) wacc[warp * kMaxHeadDim + i] = acc[c];
  }
  __syncthreads();

  float mb = -INFINITY;
  for (int w = 0; w < kPtaaWarps; ++w) mb = fmaxf(mb, wm[w]);
  const int64_t part = static_cast<int64_t>(h) * n_splits + s;
  float* part_m = scratch;
  float* part_l = scratch + static_cast<int64_t>(n_heads) * n_splits;
  float* part_acc = scratch + 2 * static_cast<int64_t>(n_heads) * n_splits + part * d;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += kPtaaThreads) {
    float a = 0.0f;
    if (mb != -INFINITY)
      for (int w = 0; w < kPtaaWarps; ++w)
        if (wm[w] != -INFINITY) a += wacc[w * kMaxHeadDim + i] * expf(wm[w] - mb);
    part_acc[i] = a;
  }
  if (threadIdx.x == 0) {
    float lb = 0.0f;
    if (mb != -INFINITY)
      for (int w = 0; w < kPtaaWarps; ++w)
        if (wm[w] != -INFINITY) lb += wl[w] * expf(wm[w] - mb);
    part_m[part] = mb;
    part_l[part] = lb;
  }
}

__global__ void ptaa_merge_kernel(float* out, const float* scratch, const float* q, int n_heads, int n_kv_heads, int d,
                                  int n_splits, LinearStateView lin, float softcap) {
  SLAKE_SHARED(float, qs, kMaxHeadDim);
  SLAKE_SHARED(float, red, 32);
  SLAKE_SHARED(float, cnum, kMaxHeadDim);  // the centroids' share of the numerator
  SLAKE_SHARED(float, cw, kPtaaThreads);   // one chunk of centroid weights
  const int h = static_cast<int>(blockIdx.x), g = h / (n_heads / n_kv_heads);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  float dot = 0.0f;
  const float n_lin = lin.n ? lin.n[g] : 0.0f;
  const bool cent = lin.centroids > 0 && n_lin > 0.0f, taylor = lin.centroids == 0 && n_lin > 0.0f;
  const float* ksum = taylor ? lin.ksum + static_cast<int64_t>(g) * d : nullptr;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) {
    qs[i] = q[static_cast<int64_t>(h) * d + i];
    if (taylor) dot += qs[i] * ksum[i];
  }
  // xbar: the evicted tokens' mean raw logit; mu = cap_logit(xbar), slope its derivative (ptaa_finish).
  const float xbar = taylor ? block_sum(dot, red) * scale / n_lin : 0.0f;  // block_sum's barriers publish qs
  const float mu = cap_logit(xbar, softcap), slope = cap_slope(xbar, softcap);
  if (!taylor) __syncthreads();
  const int K = lin.centroids;
  const float* cn = cent ? lin.cn + static_cast<int64_t>(g) * K : nullptr;
  float mc = -INFINITY;  // the largest seeded centroid logit
  if (cent) {
    for (int c = tid; c < K; c += nt)
      if (cn[c] != 0.0f) mc = fmaxf(mc, cap_logit(centroid_logit(qs, lin, g, c, d, scale), softcap));
    mc = block_max(mc, red);
  }

  const float* part_m = scratch + static_cast<int64_t>(h) * n_splits;
  const float* part_l = scratch + static_cast<int64_t>(n_heads) * n_splits + static_cast<int64_t>(h) * n_splits;
  const float* part_acc = scratch + 2 * static_cast<int64_t>(n_heads) * n_splits + static_cast<int64_t>(h) * n_splits * d;
  float m = taylor ? mu : mc;
  for (int s = 0; s < n_splits; ++s) m = fmaxf(m, part_m[s]);
  float* o = out + static_cast<int64_t>(h) * d;
  if (m == -INFINITY) {  // nothing visible and nothing evicted
    for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) o[i] = 0.0f;
    return;
  }
  const float lam = taylor ? expf(mu - m) : 0.0f;
  float den = lam * n_lin;
  if (cent) {  // weights of nt centroids at a time; every thread sums the denominator, each its dims
    for (int i = tid; i < d; i += nt) cnum[i] = 0.0f;
    float cden = 0.0f;
    for (int c0 = 0; c0 < K; c0 += nt) {
      __syncthreads();  // the previous chunk's weights are read
      const int c = c0 + tid;
      cw[tid] = c < K && cn[c] != 0.0f ? expf(cap_logit(centroid_logit(qs, lin, g, c, d, scale), softcap) - m) : 0.0f;
      __syncthreads();
      const int chunk = min(nt, K - c0);
      for (int cc = 0; cc < chunk; ++cc) {
        cden += cw[cc] * cn[c0 + cc];
        const float* cv = lin.cv + (static_cast<int64_t>(g) * K + c0 + cc) * d;
        for (int i = tid; i < d; i += nt) cnum[i] += cw[cc] * cv[i];
      }
    }
    den += cden;
  }
  for (int s = 0; s < n_splits; ++s)
    if (part_m[s] != -INFINITY) den += part_l[s] * expf(part_m[s] - m);
  const float* vsum = taylor ? lin.vsum + static_cast<int64_t>(g) * d : nullptr;
  const float* M = taylor ? lin.M + static_cast<int64_t>(g) * d * d : nullptr;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) {
    float num = 0.0f;
    for (int s = 0; s < n_splits; ++s)
      if (part_m[s] != -INFINITY) num += part_acc[static_cast<int64_t>(s) * d + i] * expf(part_m[s] - m);
    if (taylor) {
      float qm = 0.0f;  // (q^T M)[i]: column i of M, rows read in order (coalesced across threads)
      for (int k = 0; k < d; ++k) qm += qs[k] * M[static_cast<int64_t>(k) * d + i];
      num += lam * ((1.0f - slope * xbar) * vsum[i] + slope * scale * qm);
    }
    if (cent) num += cnum[i];  // written by this thread
    o[i] = num / den;
  }
}

int ptaa_splits(int max_held, int split_len) { return max_held <= 0 ? 1 : ceil_div(max_held, split_len); }

int recall_pages_per_split(int page, int split_len) { return page <= 0 || split_len < 2 * page ? 1 : split_len / page; }

int ptaa_splits(int max_held, int split_len, const RecallView& rc) {
  const int exact = ptaa_splits(max_held, split_len);
  return rc.max_chosen <= 0 ? exact : exact + ceil_div(rc.max_chosen, recall_pages_per_split(rc.page, split_len));
}

size_t ptaa_scratch_floats(int n_heads, int head_dim, int n_splits) {
  return static_cast<size_t>(n_heads) * static_cast<size_t>(n_splits) * (2 + static_cast<size_t>(head_dim));
}

void ptaa_decode(float* out, const float* q, int32_t qpos, int n_heads, const KvLayerView& kv, const LinearStateView& lin,
                 int sliding_window, int max_held, int split_len, float* scratch, Stream stream) {
  ptaa_decode(out, q, qpos, n_heads, kv, lin, sliding_window, max_held, split_len, scratch, RecallView{}, stream);
}

void ptaa_decode(float* out, const float* q, int32_t qpos, int n_heads, const KvLayerView& kv, const LinearStateView& lin,
                 int sliding_window, int max_held, int split_len, float* scratch, const RecallView& recall, Stream stream) {
  if (kv.head_dim <= 0 || kv.head_dim > kMaxHeadDim || split_len <= 0 || n_heads % kv.n_kv_heads != 0)
    throw Error("ptaa_decode: unsupported shape");
  RecallView rc = recall;
  if (rc.max_chosen > 0) {
    if (rc.page <= 0 || rc.store.head_dim != kv.head_dim || rc.store.n_kv_heads != kv.n_kv_heads)
      throw Error("ptaa_decode: the recall store's shape differs from the cache's");
    if (lin.n != nullptr)
      throw Error("ptaa_decode: recalled pages beside a linear state (the Taylor cover of algorithm.md §9.3) run on the cpu only");
    rc.pages_per_split = recall_pages_per_split(rc.page, split_len);
  } else {
    rc.max_chosen = 0;
  }
  const int exact_splits = ptaa_splits(max_held, split_len), n_splits = ptaa_splits(max_held, split_len, rc);
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_splits), static_cast<unsigned>(n_heads)), dim3(kPtaaThreads), 0, stream,
               ptaa_split_kernel)(scratch, q, qpos, n_heads, kv, sliding_window, split_len, exact_splits, rc);
  SLAKE_CHECK_LAUNCH("ptaa_split_kernel");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_heads)), dim3(kPtaaThreads), 0, stream, ptaa_merge_kernel)
  (out, scratch, q, n_heads, kv.n_kv_heads, kv.head_dim, n_splits, lin, kv.softcap);
  SLAKE_CHECK_LAUNCH("ptaa_merge_kernel");
}

}  // namespace slake::gpu
