// Compaction of the exact cache after an eviction decision: per KV head, the kept and the evicted
// rows' indices in order (a block scan over the flags), then a gather of the kept rows into the
// compacted cache and of the evicted rows into a contiguous buffer for linear_absorb_rows. The
// gather is out of place: in place, a row could be overwritten before it is moved.
#pragma once
#include "common.cuh"

namespace slake::gpu {

constexpr int kPartitionThreads = 256;

// Block per KV head.
__global__ void partition_rows_kernel(int32_t* kept_idx, int32_t* n_kept, int32_t* evicted_idx, int32_t* n_evicted,
                                      const uint8_t* flags, int64_t flags_ld, const int32_t* n_held, int64_t idx_ld) {
  SLAKE_SHARED(int, scan, 33);
  const int g = static_cast<int>(blockIdx.x), n = n_held[g];
  const uint8_t* f = flags + g * flags_ld;
  int32_t* kept = kept_idx + g * idx_ld;
  int32_t* evicted = evicted_idx + g * idx_ld;
  int kept_before = 0;
  for (int j0 = 0; j0 < n; j0 += static_cast<int>(blockDim.x)) {
    const int j = j0 + static_cast<int>(threadIdx.x);
    const int keep = j < n && f[j] ? 1 : 0;
    int chunk_kept;
    const int k = kept_before + block_exclusive_scan(keep, scan, &chunk_kept);
    if (j < n) {
      if (keep) kept[k] = j;
      else evicted[j - k] = j;  // rows before j that were not kept
    }
    kept_before += chunk_kept;
  }
  if (threadIdx.x == 0) n_kept[g] = kept_before, n_evicted[g] = n - kept_before;
}

// Block (row r, KV head g); threads over the dimensions.
__global__ void gather_rows_kernel(float* dst_k, float* dst_v, int32_t* dst_pos, int64_t dst_rows, KvLayerView src,
                                   const int32_t* idx, int64_t idx_ld, const int32_t* count) {
  const int r = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), d = src.head_dim;
  if (r >= count[g]) return;
  const int64_t from = static_cast<int64_t>(g) * src.capacity + idx[g * idx_ld + r];
  const int64_t to = static_cast<int64_t>(g) * dst_rows + r;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) {
    dst_k[to * d + i] = src.k[from * d + i];
    dst_v[to * d + i] = src.v[from * d + i];
  }
  if (dst_pos && threadIdx.x == 0) dst_pos[to] = src.pos[from];
}

void partition_rows(int32_t* kept_idx, int32_t* n_kept, int32_t* evicted_idx, int32_t* n_evicted, const uint8_t* flags,
                    int64_t flags_ld, const int32_t* n_held, int n_kv_heads, int64_t idx_ld, Stream stream) {
  if (n_kv_heads <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_kv_heads)), dim3(kPartitionThreads), 0, stream, partition_rows_kernel)
  (kept_idx, n_kept, evicted_idx, n_evicted, flags, flags_ld, n_held, idx_ld);
  SLAKE_CHECK_LAUNCH("partition_rows_kernel");
}

void gather_rows(float* dst_k, float* dst_v, int32_t* dst_pos, int64_t dst_rows, const KvLayerView& src, const int32_t* idx,
                 int64_t idx_ld, const int32_t* count, int max_count, Stream stream) {
  if (max_count <= 0 || src.n_kv_heads <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(max_count), static_cast<unsigned>(src.n_kv_heads)), dim3(128), 0, stream,
               gather_rows_kernel)(dst_k, dst_v, dst_pos, dst_rows, src, idx, idx_ld, count);
  SLAKE_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace slake::gpu
