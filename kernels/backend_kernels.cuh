// The kernels the device forward pass needs around the attention kernels: activations to bf16 for
// the GEMMs, appending a chunk's keys and values to a layer's cache, per-layer eviction scores
// (candidate scores from the prefill indicator, SLAKE's VABS layer terms, the decode victim) and
// the removal of one row per KV head. All of it mirrors src/kv/kv_evictor.cpp, src/kv/kv_scores.cpp and
// src/kv/kv_vabs.cpp, in double where those are.
#pragma once
#include "common.cuh"
#include "window_stats.cuh"

namespace slake::gpu {

// ---- small helpers ----

__global__ void to_bf16_kernel(uint16_t* out, const float* x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = float_to_bf16_bits(x[i]);
  }
}

void to_bf16(uint16_t* out, const float* x, int64_t n, Stream stream) {
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, to_bf16_kernel)(out, x, n);
  SLAKE_CHECK_LAUNCH("to_bf16_kernel");
}

__global__ void fill_i32_kernel(int32_t* p, int32_t value, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) p[i] = value;
}

void fill_i32(int32_t* p, int32_t value, int n, Stream stream) {
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(1), dim3(128), 0, stream, fill_i32_kernel)(p, value, n);
  SLAKE_CHECK_LAUNCH("fill_i32_kernel");
}

// Stores x[0..d) as a row of type t at dst. Threads of the block stride over the values (over the
// blocks of 32 for Q8_0, each quantised by one thread as slake's store_q8_0: scale max|x| / 127
// stored as f16, values round(x / scale) half away from zero).
__device__ void store_kv_row(ElemType t, uint8_t* dst, const float* x, int d) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  switch (t) {
    case ElemType::F16:
      for (int i = tid; i < d; i += nt) reinterpret_cast<uint16_t*>(dst)[i] = float_to_f16_bits(x[i]);
      return;
    case ElemType::BF16:
      for (int i = tid; i < d; i += nt) reinterpret_cast<uint16_t*>(dst)[i] = float_to_bf16_bits(x[i]);
      return;
    case ElemType::Q8_0:
      for (int b = tid; b < d / 32; b += nt) {
        const float* xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(xb[j]));
        const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        uint8_t* o = dst + b * 34;
        const uint16_t s = float_to_f16_bits(scale);
        o[0] = static_cast<uint8_t>(s & 0xffu), o[1] = static_cast<uint8_t>(s >> 8);
        for (int j = 0; j < 32; ++j) o[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(xb[j] * inv)));
      }
      return;
    default:
      for (int i = tid; i < d; i += nt) reinterpret_cast<float*>(dst)[i] = x[i];
  }
}

// Block (token t, KV head g): row row0 + t of head g = the token's key and value slice.
__global__ void kv_append_kernel(KvLayerMut kv, int row0, const float* k, const float* v, int64_t src_stride, const int32_t* pos) {
  const int t = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), d = kv.head_dim;
  const int64_t to = static_cast<int64_t>(g) * kv.capacity + row0 + t;
  store_kv_row(kv.type_k, kv.k + to * elem_row_bytes(kv.type_k, d), k + t * src_stride + g * d, d);
  store_kv_row(kv.type_v, kv.v + to * elem_row_bytes(kv.type_v, d), v + t * src_stride + g * d, d);
  if (threadIdx.x == 0) kv.pos[to] = pos[t];
}

void kv_append(const KvLayerMut& kv, int row0, const float* k, const float* v, int64_t src_stride, const int32_t* pos,
               int n_tokens, Stream stream) {
  if (n_tokens <= 0) return;
  if (row0 < 0 || row0 + n_tokens > kv.capacity) throw Error("kv_append: rows beyond the layer's capacity");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_tokens), static_cast<unsigned>(kv.n_kv_heads)), dim3(128), 0, stream,
               kv_append_kernel)(kv, row0, k, v, src_stride, pos);
  SLAKE_CHECK_LAUNCH("kv_append_kernel");
}

// Block (row r, KV head g): row row0 + r of head g of `store` = row idx[g * idx_ld + r] of `src` (with
// one_per_head, idx_ld 1 and r 0: row idx[g], skipped where it is < 0), read as floats and stored as
// the store's type, as the CPU's RecallStore::add takes an evicted row (kv_load_rows, kv_store_row).
// Row `to` (a slot of head g's area) of dst = row j of head g of src with its position, read as
// floats through x (head_dim floats of shared memory) and stored as dst's types; the whole block.
__device__ void copy_row_as(const KvLayerMut& dst, int64_t to, const KvLayerView& src, int g, int j, float* x) {
  const int d = src.head_dim;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) x[i] = kv_elem(src.type_k, src.krow(g, j), i);
  __syncthreads();
  store_kv_row(dst.type_k, dst.k + to * elem_row_bytes(dst.type_k, d), x, d);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) x[i] = kv_elem(src.type_v, src.vrow(g, j), i);
  __syncthreads();
  store_kv_row(dst.type_v, dst.v + to * elem_row_bytes(dst.type_v, d), x, d);
  if (threadIdx.x == 0) dst.pos[to] = src.pos[static_cast<int64_t>(g) * src.capacity + j];
}

__global__ void store_rows_kernel(KvLayerMut store, int row0, KvLayerView src, const int32_t* idx, int64_t idx_ld, bool one_per_head) {
  SLAKE_SHARED(float, x, kMaxHeadDim);
  const int r = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int j = idx[static_cast<int64_t>(g) * idx_ld + r];
  if (one_per_head && j < 0) return;  // block-uniform
  copy_row_as(store, static_cast<int64_t>(g) * store.capacity + row0 + r, src, g, j, x);
}

void store_rows(const KvLayerMut& store, int row0, const KvLayerView& src, const int32_t* idx, int64_t idx_ld, int count,
                Stream stream) {
  if (count <= 0) return;
  if (row0 < 0 || row0 + count > store.capacity || store.head_dim != src.head_dim || store.n_kv_heads != src.n_kv_heads)
    throw Error("store_rows: rows beyond the store's capacity, or another shape");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(count), static_cast<unsigned>(store.n_kv_heads)), dim3(128), 0, stream, store_rows_kernel)
  (store, row0, src, idx, idx_ld, false);
  SLAKE_CHECK_LAUNCH("store_rows_kernel");
}

void store_row_each(const KvLayerMut& store, int row0, const KvLayerView& src, const int32_t* row, Stream stream) {
  if (row0 < 0 || row0 + 1 > store.capacity || store.head_dim != src.head_dim || store.n_kv_heads != src.n_kv_heads)
    throw Error("store_row_each: a row beyond the store's capacity, or another shape");
  SLAKE_LAUNCH(dim3(1, static_cast<unsigned>(store.n_kv_heads)), dim3(128), 0, stream, store_rows_kernel)
  (store, row0, src, row, 1, true);
  SLAKE_CHECK_LAUNCH("store_rows_kernel");
}

// Block (row r, KV head g): row r of the rows of head g's chosen pages (pages[g * pages_ld + i], i <
// n_chosen[g], increasing: only the store's last page, chosen last, may be short) into row row0 + r
// of dst, as floats stored in dst's types; block (0, g) also sets n_held[g] = row0 + their count.
__global__ void recall_gather_kernel(KvLayerMut dst, int row0, int32_t* n_held, KvLayerView store, int page, const int32_t* pages,
                                     int64_t pages_ld, const int32_t* n_chosen) {
  SLAKE_SHARED(float, x, kMaxHeadDim);
  const int r = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int chosen = n_chosen[g], stored = store.n_held[g];
  if (r == 0 && threadIdx.x == 0) {
    int rows = 0;
    if (chosen > 0) {
      const int last = pages[static_cast<int64_t>(g) * pages_ld + chosen - 1];
      rows = (chosen - 1) * page + min(page, stored - last * page);
    }
    n_held[g] = row0 + rows;
  }
  const int i = r / page;
  if (i >= chosen) return;  // block-uniform, as below
  const int j = pages[static_cast<int64_t>(g) * pages_ld + i] * page + r % page;
  if (j >= stored) return;
  copy_row_as(dst, static_cast<int64_t>(g) * dst.capacity + row0 + r, store, g, j, x);
}

void recall_gather(const KvLayerMut& dst, int row0, int32_t* n_held, const KvLayerView& store, int page, const int32_t* pages,
                   int64_t pages_ld, const int32_t* n_chosen, int max_pages, Stream stream) {
  if (max_pages <= 0) return;
  if (page <= 0 || row0 < 0 || row0 + static_cast<int64_t>(max_pages) * page > dst.capacity || dst.head_dim != store.head_dim ||
      dst.n_kv_heads != store.n_kv_heads || pages_ld < max_pages)
    throw Error("recall_gather: rows beyond the area's capacity, or another shape");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(max_pages * page), static_cast<unsigned>(dst.n_kv_heads)), dim3(128), 0, stream,
               recall_gather_kernel)
  (dst, row0, n_held, store, page, pages, pages_ld, n_chosen);
  SLAKE_CHECK_LAUNCH("recall_gather_kernel");
}

// ---- prefill eviction ----

__global__ void gather_scores_kernel(float* out, int64_t ld, const float* indicator, int P, KvLayerView kv, int n_cand) {
  const int g = static_cast<int>(blockIdx.y);
  const int r = static_cast<int>(blockIdx.x) * 128 + static_cast<int>(threadIdx.x);
  if (r >= n_cand) return;
  const int32_t p = kv.pos[static_cast<int64_t>(g) * kv.capacity + r];
  out[static_cast<int64_t>(g) * ld + r] = p >= 0 && p < P ? indicator[static_cast<int64_t>(g) * P + p] : 0.0f;
}

void gather_scores(float* out, int64_t ld, const float* indicator, int P, const KvLayerView& kv, int n_cand, Stream stream) {
  if (n_cand <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(ceil_div(n_cand, 128)), static_cast<unsigned>(kv.n_kv_heads)), dim3(128), 0, stream,
               gather_scores_kernel)(out, ld, indicator, P, kv, n_cand);
  SLAKE_CHECK_LAUNCH("gather_scores_kernel");
}

__global__ void scatter_scores_kernel(float* indicator, int P, const float* rows, KvLayerView kv, int n_cand) {
  const int g = static_cast<int>(blockIdx.y);
  const int r = static_cast<int>(blockIdx.x) * 128 + static_cast<int>(threadIdx.x);
  if (r >= n_cand) return;
  const int32_t p = kv.pos[static_cast<int64_t>(g) * kv.capacity + r];
  if (p >= 0 && p < P) indicator[static_cast<int64_t>(g) * P + p] = rows[static_cast<int64_t>(g) * n_cand + r];
}

void scatter_scores(float* indicator, int P, const float* rows, const KvLayerView& kv, int n_cand, Stream stream) {
  if (n_cand <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(ceil_div(n_cand, 128)), static_cast<unsigned>(kv.n_kv_heads)), dim3(128), 0, stream,
               scatter_scores_kernel)(indicator, P, rows, kv, n_cand);
  SLAKE_CHECK_LAUNCH("scatter_scores_kernel");
}

// Block (observing query i, query head h), as one (i, h) step of slake::vabs_terms: the true
// softmax row A over keys 0 .. S - n_obs + i, PTAA's row w with the prefix tokens not flagged in `kept` folded into
// the linear state, then out = {0.5 * TV * (VA / sum |v|)^0.1, entropy of A}.
__global__ void vabs_kernel(double* out, const float* q_window, int S, int n_obs, int P, int n_heads, KvLayerView kv,
                            const uint8_t* kept) {
  SLAKE_SHARED(double, red, 32);
  const int i = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), d = kv.head_dim;
  const int g = h / (n_heads / kv.n_kv_heads), n_vis = S - n_obs + i + 1;
  const float* q = q_window + (static_cast<int64_t>(i) * n_heads + h) * d;
  const uint8_t* kp = kept + static_cast<int64_t>(g) * P;
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  // raw: the logit before the soft-cap, which PTAA's Taylor state is linear in; x: the capped one
  // (the same without a cap). As slake::vabs_terms.
  const double cap = kv.softcap;
  double mA = -INFINITY, mE = -INFINITY, musum = 0.0, nev = 0.0;
  for (int j = tid; j < n_vis; j += nt) {
    const double raw = window_logit_raw(q, kv, g, j), x = cap_logit_d(raw, cap);
    mA = fmax(mA, x);
    if (j < P && !kp[j]) musum += raw, nev += 1.0;
    else mE = fmax(mE, x);
  }
  mA = block_reduce_d(mA, red, true);
  mE = block_reduce_d(mE, red, true);
  musum = block_reduce_d(musum, red, false);
  nev = block_reduce_d(nev, red, false);
  const double xbar = nev > 0 ? musum / nev : 0.0, mu = cap_logit_d(xbar, cap);
  const double th = cap > 0 ? tanh(xbar / cap) : 0.0, slope = 1.0 - th * th;
  const double mstar = nev > 0 ? fmax(mE, mu) : mE, lam = nev > 0 ? exp(mu - mstar) : 0.0;
  double zA = 0.0, zE = 0.0;
  for (int j = tid; j < n_vis; j += nt) {
    const double x = window_logit(q, kv, g, j);
    zA += exp(x - mA);
    if (!(j < P && !kp[j])) zE += exp(x - mstar);
  }
  zA = block_reduce_d(zA, red, false);
  zE = block_reduce_d(zE, red, false);
  const double z = lam * nev + zE;
  double tv = 0.0, va = 0.0, vsum = 0.0, entropy = 0.0;
  for (int j = tid; j < n_vis; j += nt) {
    const double raw = window_logit_raw(q, kv, g, j), x = cap_logit_d(raw, cap);
    const bool exact = !(j < P && !kp[j]);
    const double A = exp(x - mA) / zA;
    const double w = exact ? exp(x - mstar) / z : lam * (1.0 + slope * (raw - xbar)) / z;
    const double diff = fabs(w - A);
    double n2 = 0.0;
    const uint8_t* vj = kv.vrow(g, j);
    for (int e = 0; e < d; ++e) {
      const double ve = kv_elem(kv.type_v, vj, e);
      n2 += ve * ve;
    }
    const double vn = sqrt(n2);
    tv += diff;
    va += vn * diff;
    vsum += vn;
    if (A > 0) entropy -= A * log(A);
  }
  tv = block_reduce_d(tv, red, false);
  va = block_reduce_d(va, red, false);
  vsum = block_reduce_d(vsum, red, false);
  entropy = block_reduce_d(entropy, red, false);
  if (tid == 0) {
    out[(static_cast<int64_t>(i) * n_heads + h) * 2] = 0.5 * tv * (vsum > 0 ? pow(va / vsum, 0.1) : 0.0);
    out[(static_cast<int64_t>(i) * n_heads + h) * 2 + 1] = entropy;
  }
}

void vabs_terms(double* out, const float* q_window, int S, int n_obs, int P, int n_heads, const KvLayerView& kv,
                const uint8_t* kept, Stream stream) {
  if (n_obs <= 0 || P <= 0 || P > S - n_obs || n_heads % kv.n_kv_heads != 0) throw Error("vabs_terms: needs 0 < P <= S - n_obs");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_obs), static_cast<unsigned>(n_heads)), dim3(kWindowThreads), 0, stream, vabs_kernel)
  (out, q_window, S, n_obs, P, n_heads, kv, kept);
  SLAKE_CHECK_LAUNCH("vabs_kernel");
}

// ---- decode eviction ----

constexpr int kVictimThreads = 256;
constexpr int kVictimLogitRows = 64;

// Thread per (query head h, row r < n_held of its KV head): logits[h * capacity + r] = the
// query's logit for the row (window_logit, the CPU's order of summation), each dot product once.
__global__ void victim_logits_kernel(double* logits, const float* q, int32_t qpos, int n_heads, KvLayerView kv) {
  const int h = static_cast<int>(blockIdx.y), g = h / (n_heads / kv.n_kv_heads);
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= kv.n_held[g] || kv.pos[static_cast<int64_t>(g) * kv.capacity + r] > qpos) return;
  logits[static_cast<int64_t>(h) * kv.capacity + r] = window_logit(q + static_cast<int64_t>(h) * kv.head_dim, kv, g, r);
}

// Block per KV head g: the score of each of the first n_cand rows (the current query's softmax
// over all n_held rows, pooled along the candidates, averaged over the group; or the recency rank)
// and the row with the lowest score (the first on ties): slake::KvEvictor::decode_victim. Reads
// the logits victim_logits_kernel wrote.
__global__ void decode_victims_kernel(int32_t* victim, double* scratch, const double* logits, int32_t qpos, int n_heads,
                                      KvLayerView kv, int n_cand, int mode) {
  SLAKE_SHARED(double, red, 32);
  SLAKE_SHARED(double, best_v, kVictimThreads);
  SLAKE_SHARED(int, best_i, kVictimThreads);
  const int g = static_cast<int>(blockIdx.x), group = n_heads / kv.n_kv_heads;
  const int n = kv.n_held[g], tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int32_t* ph = kv.pos + static_cast<int64_t>(g) * kv.capacity;
  double* p = scratch + static_cast<int64_t>(g) * 2 * kv.capacity;
  double* acc = p + kv.capacity;
  for (int r = tid; r < n_cand; r += nt) acc[r] = 0.0;
  if (mode == 2) {  // streaming: 4 sinks above everything, then recency
    for (int r = tid; r < n_cand; r += nt) {
      const int pr = ph[r];
      acc[r] = pr < 4 ? static_cast<double>(qpos + 1) + (4 - pr) : static_cast<double>(pr);
    }
  } else {
    for (int gh = 0; gh < group; ++gh) {
      const double* x = logits + static_cast<int64_t>(g * group + gh) * kv.capacity;
      double m = -INFINITY;
      for (int r = tid; r < n; r += nt)
        if (ph[r] <= qpos) m = fmax(m, x[r]);
      m = block_reduce_d(m, red, true);
      double z = 0.0;
      for (int r = tid; r < n; r += nt) {  // p[r] is this thread's until the barrier below
        p[r] = ph[r] <= qpos ? exp(x[r] - m) : 0.0;
        z += p[r];
      }
      z = block_reduce_d(z, red, false);
      for (int r = tid; r < n; r += nt) p[r] /= z;
      __syncthreads();
      const int half = mode == 0 ? 2 : 3;
      for (int r = tid; r < n_cand; r += nt) {
        const int lo = max(0, r - half), hi = min(n_cand - 1, r + half);
        double pooled = mode == 0 ? 0.0 : -INFINITY;
        for (int k = lo; k <= hi; ++k) pooled = mode == 0 ? pooled + p[k] : fmax(pooled, p[k]);
        if (mode == 0) pooled /= 5.0;
        acc[r] += pooled / group;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  double bv = INFINITY;
  int bi = n_cand;
  for (int r = tid; r < n_cand; r += nt)
    if (acc[r] < bv) bv = acc[r], bi = r;  // rows visited in increasing order: the first minimum
  best_v[tid] = bv, best_i[tid] = bi;
  __syncthreads();
  for (int s = nt / 2; s > 0; s /= 2) {
    if (tid < s) {
      const double ov = best_v[tid + s];
      const int oi = best_i[tid + s];
      if (ov < best_v[tid] || (ov == best_v[tid] && oi < best_i[tid])) best_v[tid] = ov, best_i[tid] = oi;
    }
    __syncthreads();
  }
  if (tid == 0) victim[g] = n_cand > 0 ? best_i[0] : -1;
}

size_t victim_scratch_doubles(int n_heads, int n_kv_heads, int capacity) {
  return (2 * static_cast<size_t>(n_kv_heads) + static_cast<size_t>(n_heads)) * capacity;
}

void decode_victims(int32_t* victim, double* scratch, const float* q, int32_t qpos, int n_heads, const KvLayerView& kv, int n_cand,
                    int mode, Stream stream) {
  if (n_heads % kv.n_kv_heads != 0 || mode < 0 || mode > 2) throw Error("decode_victims: unsupported shape or mode");
  double* logits = scratch + 2 * static_cast<int64_t>(kv.n_kv_heads) * kv.capacity;
  if (mode != 2) {
    const unsigned blocks = static_cast<unsigned>((kv.capacity + kVictimLogitRows - 1) / kVictimLogitRows);
    SLAKE_LAUNCH(dim3(blocks, static_cast<unsigned>(n_heads)), dim3(kVictimLogitRows), 0, stream, victim_logits_kernel)
    (logits, q, qpos, n_heads, kv);
    SLAKE_CHECK_LAUNCH("victim_logits_kernel");
  }
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(kv.n_kv_heads)), dim3(kVictimThreads), 0, stream, decode_victims_kernel)
  (victim, scratch, logits, qpos, n_heads, kv, n_cand, mode);
  SLAKE_CHECK_LAUNCH("decode_victims_kernel");
}

// Block per (kRemoveRows rows, KV head g): row j of `src` with row[g] < j < n_held goes to row
// j - shift of `dst`, as stored bytes (16-bit words: every row type's size is even).
constexpr int kRemoveRows = 8;
__global__ void copy_rows_after_kernel(KvLayerMut dst, KvLayerMut src, const int32_t* row, int n_held, int shift) {
  const int g = static_cast<int>(blockIdx.y), r = row[g];
  if (r < 0) return;
  const int j0 = max(r + 1, static_cast<int>(blockIdx.x) * kRemoveRows), j1 = min(n_held, (static_cast<int>(blockIdx.x) + 1) * kRemoveRows);
  if (j0 >= j1) return;
  const int64_t wk = elem_row_bytes(src.type_k, src.head_dim) / 2, wv = elem_row_bytes(src.type_v, src.head_dim) / 2;
  const uint16_t* sk = reinterpret_cast<const uint16_t*>(src.k) + static_cast<int64_t>(g) * src.capacity * wk;
  const uint16_t* sv = reinterpret_cast<const uint16_t*>(src.v) + static_cast<int64_t>(g) * src.capacity * wv;
  uint16_t* dk = reinterpret_cast<uint16_t*>(dst.k) + static_cast<int64_t>(g) * dst.capacity * wk;
  uint16_t* dv = reinterpret_cast<uint16_t*>(dst.v) + static_cast<int64_t>(g) * dst.capacity * wv;
  const int cnt = j1 - j0, tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int64_t e = tid; e < cnt * wk; e += nt) dk[(j0 - shift) * wk + e] = sk[j0 * wk + e];
  for (int64_t e = tid; e < cnt * wv; e += nt) dv[(j0 - shift) * wv + e] = sv[j0 * wv + e];
  for (int e = tid; e < cnt; e += nt)
    dst.pos[static_cast<int64_t>(g) * dst.capacity + j0 - shift + e] = src.pos[static_cast<int64_t>(g) * src.capacity + j0 + e];
}

void shift_rows_up(const KvLayerMut& kv, const KvLayerMut& scratch, const int32_t* row, int n_held, int by, Stream stream) {
  if (scratch.n_kv_heads != kv.n_kv_heads || scratch.head_dim != kv.head_dim || scratch.type_k != kv.type_k ||
      scratch.type_v != kv.type_v || scratch.capacity < n_held || kv.capacity < n_held)
    throw Error("remove_rows: the scratch area does not match the cache");
  if (by < 1) throw Error("shift_rows_up: rows move up by at least one");
  const dim3 grid(static_cast<unsigned>((n_held + kRemoveRows - 1) / kRemoveRows), static_cast<unsigned>(kv.n_kv_heads));
  if (n_held <= 0) return;
  // Out to the scratch area and back one row up: the blocks of one launch never read a row
  // another block of it writes.
  SLAKE_LAUNCH(grid, dim3(128), 0, stream, copy_rows_after_kernel)(scratch, kv, row, n_held, 0);
  SLAKE_CHECK_LAUNCH("copy_rows_after_kernel");
  SLAKE_LAUNCH(grid, dim3(128), 0, stream, copy_rows_after_kernel)(kv, scratch, row, n_held, by);
  SLAKE_CHECK_LAUNCH("copy_rows_after_kernel");
}

void remove_rows(const KvLayerMut& kv, const KvLayerMut& scratch, const int32_t* row, int n_held, Stream stream) {
  shift_rows_up(kv, scratch, row, n_held, 1, stream);
}

}  // namespace slake::gpu
