// Absorption of evicted tokens into the linear state (slake::LinearState): n += 1, ksum += k,
// vsum += v, M += k v^T per token, k and v the stored rows' values (kv_elem). Decode absorbs one
// row per KV head (rank-1 update); prefill absorbs the evicted rows of each head, read in place
// through their indices, with a tiled K^T V (or, for fp32 rows, cuBLAS: cublas_gemm.h).
#pragma once
#include "common.cuh"

namespace slake::gpu {

// Block (row i of M, KV head g); threads over the columns. Block i == 0 also updates the sums.
__global__ void linear_absorb_one_kernel(LinearStateView lin, KvLayerView kv, const int32_t* row) {
  const int i = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), d = kv.head_dim;
  const int r = row[g];
  if (r < 0) return;  // block-uniform: this head evicts nothing this step
  const uint8_t* k = kv.krow(g, r);
  const uint8_t* v = kv.vrow(g, r);
  float* Mrow = lin.M + (static_cast<int64_t>(g) * d + i) * d;
  const float ki = kv_elem(kv.type_k, k, i);
  for (int j = static_cast<int>(threadIdx.x); j < d; j += static_cast<int>(blockDim.x)) Mrow[j] += ki * kv_elem(kv.type_v, v, j);
  if (i == 0) {
    for (int j = static_cast<int>(threadIdx.x); j < d; j += static_cast<int>(blockDim.x)) {
      lin.ksum[static_cast<int64_t>(g) * d + j] += kv_elem(kv.type_k, k, j);
      lin.vsum[static_cast<int64_t>(g) * d + j] += kv_elem(kv.type_v, v, j);
    }
    if (threadIdx.x == 0) lin.n[g] += 1.0f;
  }
}

constexpr int kAbsorbTile = 16;   // M tile edge
constexpr int kAbsorbChunk = 32;  // tokens staged in shared memory at a time

// Block (tile of M columns, tile of M rows, KV head): M[i][j] += sum_t k[t][i] v[t][j] over the
// head's count[g] listed rows, staged through shared memory kAbsorbChunk tokens at a time.
__global__ void linear_absorb_rows_kernel(LinearStateView lin, KvLayerView kv, const int32_t* idx, int64_t idx_ld,
                                          const int32_t* count) {
  SLAKE_SHARED(float, ks, kAbsorbChunk * kAbsorbTile);
  SLAKE_SHARED(float, vs, kAbsorbChunk * kAbsorbTile);
  const int g = static_cast<int>(blockIdx.z), tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int i0 = static_cast<int>(blockIdx.y) * kAbsorbTile, j0 = static_cast<int>(blockIdx.x) * kAbsorbTile;
  const int i = i0 + ty, j = j0 + tx, n = count[g], tid = ty * kAbsorbTile + tx, d = kv.head_dim;
  const int32_t* rows = idx + g * idx_ld;
  float acc = 0.0f;
  for (int t0 = 0; t0 < n; t0 += kAbsorbChunk) {
    for (int e = tid; e < kAbsorbChunk * kAbsorbTile; e += kAbsorbTile * kAbsorbTile) {
      const int t = t0 + e / kAbsorbTile, c = e % kAbsorbTile;
      ks[e] = t < n && i0 + c < d ? kv_elem(kv.type_k, kv.krow(g, rows[t]), i0 + c) : 0.0f;
      vs[e] = t < n && j0 + c < d ? kv_elem(kv.type_v, kv.vrow(g, rows[t]), j0 + c) : 0.0f;
    }
    __syncthreads();
    for (int t = 0; t < kAbsorbChunk; ++t) acc += ks[t * kAbsorbTile + ty] * vs[t * kAbsorbTile + tx];
    __syncthreads();
  }
  if (i < d && j < d) lin.M[(static_cast<int64_t>(g) * d + i) * d + j] += acc;
}

// Block per KV head; threads over the dimensions: ksum, vsum and n.
__global__ void linear_state_sums_kernel(LinearStateView lin, KvLayerView kv, const int32_t* idx, int64_t idx_ld,
                                         const int32_t* count) {
  const int g = static_cast<int>(blockIdx.x), n = count[g], d = kv.head_dim;
  const int32_t* rows = idx + g * idx_ld;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) {
    float ks = 0.0f, vs = 0.0f;
    for (int t = 0; t < n; ++t) ks += kv_elem(kv.type_k, kv.krow(g, rows[t]), i), vs += kv_elem(kv.type_v, kv.vrow(g, rows[t]), i);
    lin.ksum[static_cast<int64_t>(g) * d + i] += ks;
    lin.vsum[static_cast<int64_t>(g) * d + i] += vs;
  }
  if (threadIdx.x == 0) lin.n[g] += static_cast<float>(n);
}

void linear_absorb_one(const LinearStateView& lin, const KvLayerView& kv, const int32_t* row, Stream stream) {
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(kv.head_dim), static_cast<unsigned>(kv.n_kv_heads)), dim3(128), 0, stream,
               linear_absorb_one_kernel)(lin, kv, row);
  SLAKE_CHECK_LAUNCH("linear_absorb_one_kernel");
}

void linear_state_sums(const LinearStateView& lin, const KvLayerView& kv, const int32_t* idx, int64_t idx_ld,
                       const int32_t* count, Stream stream) {
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(kv.n_kv_heads)), dim3(128), 0, stream, linear_state_sums_kernel)
  (lin, kv, idx, idx_ld, count);
  SLAKE_CHECK_LAUNCH("linear_state_sums_kernel");
}

void linear_absorb_rows(const LinearStateView& lin, const KvLayerView& kv, const int32_t* idx, int64_t idx_ld,
                        const int32_t* count, Stream stream) {
  const unsigned tiles = static_cast<unsigned>(ceil_div(kv.head_dim, kAbsorbTile));
  SLAKE_LAUNCH(dim3(tiles, tiles, static_cast<unsigned>(kv.n_kv_heads)), dim3(kAbsorbTile, kAbsorbTile), 0, stream,
               linear_absorb_rows_kernel)(lin, kv, idx, idx_ld, count);
  SLAKE_CHECK_LAUNCH("linear_absorb_rows_kernel");
  linear_state_sums(lin, kv, idx, idx_ld, count, stream);
}

}  // namespace slake::gpu
