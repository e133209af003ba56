// Per-KV-head top-k of token scores, by radix select: four 8-bit passes over order-preserving
// integer keys find the key of the keep-th best score; rows above it are kept, and of the rows
// equal to it the lowest indices (a block scan in index order), as the CPU's stable sort does.
#pragma once
#include "common.cuh"

namespace slake::gpu {

constexpr int kTopkThreads = 256;

// Larger float, larger key; -0 and +0 map to the same key.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block per KV head.
__global__ void topk_flags_kernel(uint8_t* flags, const float* scores, int n, int64_t ld, int64_t keep) {
  SLAKE_SHARED(int, hist, 256);
  SLAKE_SHARED(uint32_t, chosen, 2);  // key prefix so far, rows still to take at that prefix
  SLAKE_SHARED(int, scan, 33);
  const float* s = scores + static_cast<int64_t>(blockIdx.x) * ld;
  uint8_t* f = flags + static_cast<int64_t>(blockIdx.x) * ld;
  const int t = static_cast<int>(threadIdx.x);
  if (keep <= 0 || keep >= n) {
    for (int j = t; j < n; j += static_cast<int>(blockDim.x)) f[j] = keep > 0 ? 1 : 0;
    return;
  }
  if (t == 0) chosen[0] = 0, chosen[1] = static_cast<uint32_t>(keep);
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = t; b < 256; b += static_cast<int>(blockDim.x)) hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = chosen[0];
    for (int j = t; j < n; j += static_cast<int>(blockDim.x)) {
      const uint32_t k = order_key(s[j]);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1);
    }
    __syncthreads();
    if (t == 0) {  // the bin, from the top, where the remaining count is reached
      uint32_t remaining = chosen[1];
      int b = 255;
      for (; b > 0 && static_cast<uint32_t>(hist[b]) < remaining; --b) remaining -= static_cast<uint32_t>(hist[b]);
      chosen[0] = prefix | (static_cast<uint32_t>(b) << shift);
      chosen[1] = remaining;
    }
    __syncthreads();
    mask |= 255u << shift;
  }
  const uint32_t threshold = chosen[0];
  const int ties_to_take = static_cast<int>(chosen[1]);
  int ties_before = 0;  // rows equal to the threshold in earlier chunks
  for (int j0 = 0; j0 < n; j0 += static_cast<int>(blockDim.x)) {
    const int j = j0 + t;
    const uint32_t k = j < n ? order_key(s[j]) : 0;
    const int tie = j < n && k == threshold ? 1 : 0;
    int chunk_ties;
    const int rank = ties_before + block_exclusive_scan(tie, scan, &chunk_ties);
    if (j < n) f[j] = k > threshold || (tie && rank < ties_to_take) ? 1 : 0;
    ties_before += chunk_ties;
  }
}

void topk_flags(uint8_t* flags, const float* scores, int n_kv_heads, int n, int64_t ld, int64_t keep, Stream stream) {
  if (n_kv_heads <= 0 || n <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_kv_heads)), dim3(kTopkThreads), 0, stream, topk_flags_kernel)
  (flags, scores, n, ld, keep);
  SLAKE_CHECK_LAUNCH("topk_flags_kernel");
}

}  // namespace slake::gpu
