// The observation-window statistics of a layer after prefill (src/kv/kv_scores.cpp window_stats):
// the softmax rows A[h, i, :] of the last `n_obs` queries over the layer's rows, then per candidate
// row j < P the mean and unbiased variance over i (the CAKE indicator mean + gamma var, pooled along j and
// averaged over each KV head's query heads), the entropy sum and the variance sum. In double, as
// the CPU. Four launches: row max/normaliser per (query, head); per-row column statistics; the
// pooled indicator; the totals.
#pragma once
#include "common.cuh"

namespace slake::gpu {

constexpr int kWindowThreads = 128;

__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ double warp_max_d(double v) {
  for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
// Block reductions in double (blockDim.x a multiple of 32); scratch: 32 doubles of shared memory.
__device__ __forceinline__ double block_reduce_d(double v, double* scratch, bool is_max) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  v = is_max ? warp_max_d(v) : warp_sum_d(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x) / 32 ? scratch[lane] : (is_max ? -INFINITY : 0.0);
  return is_max ? warp_max_d(v) : warp_sum_d(v);
}

// x = q . k / sqrt(d) for key row j of head g as stored, soft-capped by kv.softcap: the dot in
// fp32, the scaling and the cap in double. The CPU's window_stats and vabs_terms take their
// logits from RowBlock::scores (a block of up to 16 queries, the query scaled in fp32 first):
// window_stats caps them there in fp32 (lanes_soft_cap), vabs_terms in double; the same to fp32
// rounding.
// window_logit_raw leaves the cap off.
__device__ __forceinline__ double window_logit_raw(const float* q, const KvLayerView& kv, int g, int j) {
  const uint8_t* k = kv.krow(g, j);
  const int d = kv.head_dim;
  float dot = 0.0f;
  for (int e = 0; e < d; ++e) dot += q[e] * kv_elem(kv.type_k, k, e);
  return static_cast<double>(dot) * (1.0 / sqrt(static_cast<double>(d)));
}
__device__ __forceinline__ double window_logit(const float* q, const KvLayerView& kv, int g, int j) {
  return cap_logit_d(window_logit_raw(q, kv, g, j), static_cast<double>(kv.softcap));
}

// Scratch (doubles): row_m [n_obs][n_heads], row_z [n_obs][n_heads], I [n_heads][P],
// part_entropy [n_heads][chunks], part_var [n_heads][chunks], chunks = ceil(P / kWindowThreads).
struct WindowScratch {
  double *row_m, *row_z, *I, *part_entropy, *part_var;
  int chunks;
};
__host__ __device__ inline WindowScratch window_scratch(double* base, int n_heads, int n_obs, int P) {
  const int chunks = (P + kWindowThreads - 1) / kWindowThreads;
  WindowScratch w;
  w.row_m = base;
  w.row_z = w.row_m + n_obs * n_heads;
  w.I = w.row_z + n_obs * n_heads;
  w.part_entropy = w.I + static_cast<int64_t>(n_heads) * P;
  w.part_var = w.part_entropy + n_heads * chunks;
  w.chunks = chunks;
  return w;
}

// Block (observing query i, query head h): max and normaliser of its row over rows 0 .. S - n_obs + i
// (the query's own row and those before it).
__global__ void window_row_stats_kernel(double* scratch, const float* q_window, int S, int n_obs, int P, int n_heads,
                                        KvLayerView kv) {
  SLAKE_SHARED(double, red, 32);
  const WindowScratch w = window_scratch(scratch, n_heads, n_obs, P);
  const int i = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), d = kv.head_dim;
  const int g = h / (n_heads / kv.n_kv_heads), n_vis = S - n_obs + i + 1;
  const float* q = q_window + (static_cast<int64_t>(i) * n_heads + h) * d;
  double m = -INFINITY;
  for (int j = static_cast<int>(threadIdx.x); j < n_vis; j += static_cast<int>(blockDim.x)) m = fmax(m, window_logit(q, kv, g, j));
  m = block_reduce_d(m, red, true);
  double z = 0.0;
  for (int j = static_cast<int>(threadIdx.x); j < n_vis; j += static_cast<int>(blockDim.x)) z += exp(window_logit(q, kv, g, j) - m);
  z = block_reduce_d(z, red, false);
  if (threadIdx.x == 0) w.row_m[i * n_heads + h] = m, w.row_z[i * n_heads + h] = z;
}

// Block (chunk of candidate rows, query head h); thread per row j: mean, variance and entropy of
// A[h, :, j] over the observing queries, the indicator before pooling, and the chunk's
// entropy/variance sums.
__global__ void window_column_kernel(double* scratch, const float* q_window, int S, int n_obs, int P, int n_heads, KvLayerView kv,
                                     double gamma) {
  SLAKE_SHARED(double, red, 32);
  const WindowScratch w = window_scratch(scratch, n_heads, n_obs, P);
  const int h = static_cast<int>(blockIdx.y), d = kv.head_dim, g = h / (n_heads / kv.n_kv_heads);
  const int j = static_cast<int>(blockIdx.x) * kWindowThreads + static_cast<int>(threadIdx.x);
  double entropy = 0.0, var = 0.0;
  if (j < P) {
    double sum = 0.0, sumsq = 0.0;
    for (int i = 0; i < n_obs; ++i) {
      const double A = j <= S - n_obs + i ? exp(window_logit(q_window + (static_cast<int64_t>(i) * n_heads + h) * d, kv, g, j) -
                                         w.row_m[i * n_heads + h]) / w.row_z[i * n_heads + h]
                                   : 0.0;
      sum += A;
      sumsq += A * A;
      entropy -= A * log(A + 1e-10);
    }
    const double mean = sum / n_obs;
    var = n_obs > 1 ? fmax(0.0, (sumsq - n_obs * mean * mean) / (n_obs - 1)) : 0.0;
    w.I[static_cast<int64_t>(h) * P + j] = mean + gamma * var;
  }
  entropy = block_reduce_d(entropy, red, false);
  var = block_reduce_d(var, red, false);
  if (threadIdx.x == 0) {
    w.part_entropy[h * w.chunks + static_cast<int>(blockIdx.x)] = entropy;
    w.part_var[h * w.chunks + static_cast<int>(blockIdx.x)] = var;
  }
}

// Block (chunk of candidate rows, KV head g): pooled indicator averaged over the group, summed in
// fp32 in head order like the CPU.
__global__ void window_indicator_kernel(float* indicator, const double* scratch, int n_obs, int P, int n_heads, int n_kv_heads,
                                        int pool) {
  const WindowScratch w = window_scratch(const_cast<double*>(scratch), n_heads, n_obs, P);
  const int g = static_cast<int>(blockIdx.y), group = n_heads / n_kv_heads;
  const int j = static_cast<int>(blockIdx.x) * kWindowThreads + static_cast<int>(threadIdx.x);
  if (j >= P) return;
  const int half = pool == 0 ? 2 : 3, lo = max(0, j - half), hi = min(P - 1, j + half);
  float acc = 0.0f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const double* I = w.I + static_cast<int64_t>(h) * P;
    double pooled = pool == 0 ? 0.0 : -INFINITY;
    for (int k = lo; k <= hi; ++k) pooled = pool == 0 ? pooled + I[k] : fmax(pooled, I[k]);
    if (pool == 0) pooled /= 5.0;
    acc += static_cast<float>(pooled / group);
  }
  indicator[static_cast<int64_t>(g) * P + j] = acc;
}

__global__ void window_totals_kernel(double* totals, const double* scratch, int n_obs, int P, int n_heads) {
  const WindowScratch w = window_scratch(const_cast<double*>(scratch), n_heads, n_obs, P);
  if (threadIdx.x != 0) return;
  double e = 0.0, v = 0.0;
  for (int c = 0; c < n_heads * w.chunks; ++c) e += w.part_entropy[c], v += w.part_var[c];
  totals[0] = e, totals[1] = v;
}

size_t window_stats_scratch_doubles(int n_heads, int n_obs, int P) {
  const int chunks = ceil_div(P, kWindowThreads);
  return static_cast<size_t>(n_heads) * (2 * static_cast<size_t>(n_obs) + static_cast<size_t>(P) + 2 * static_cast<size_t>(chunks));
}

void window_stats(float* indicator, double* totals, const float* q_window, int S, int n_obs, int P, int n_heads, const KvLayerView& kv,
                  double gamma, int pool, double* scratch, Stream stream) {
  if (n_obs <= 0 || P <= 0 || P > S - n_obs || n_heads % kv.n_kv_heads != 0)
    throw Error("window_stats: needs 0 < P <= S - n_obs");
  const unsigned chunks = static_cast<unsigned>(ceil_div(P, kWindowThreads));
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_obs), static_cast<unsigned>(n_heads)), dim3(kWindowThreads), 0, stream,
               window_row_stats_kernel)(scratch, q_window, S, n_obs, P, n_heads, kv);
  SLAKE_CHECK_LAUNCH("window_row_stats_kernel");
  SLAKE_LAUNCH(dim3(chunks, static_cast<unsigned>(n_heads)), dim3(kWindowThreads), 0, stream, window_column_kernel)
  (scratch, q_window, S, n_obs, P, n_heads, kv, gamma);
  SLAKE_CHECK_LAUNCH("window_column_kernel");
  SLAKE_LAUNCH(dim3(chunks, static_cast<unsigned>(kv.n_kv_heads)), dim3(kWindowThreads), 0, stream, window_indicator_kernel)
  (indicator, scratch, n_obs, P, n_heads, kv.n_kv_heads, pool);
  SLAKE_CHECK_LAUNCH("window_indicator_kernel");
  SLAKE_LAUNCH(dim3(1), dim3(32), 0, stream, window_totals_kernel)(totals, scratch, n_obs, P, n_heads);
  SLAKE_CHECK_LAUNCH("window_totals_kernel");
}

}  // namespace slake::gpu
