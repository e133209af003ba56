// Compaction of the exact cache after an eviction decision: per KV head, the kept and the evicted
// rows' indices in order (a block scan over the flags), then a gather of the kept rows, as stored
// bytes, into the compacted cache (linear_absorb_rows reads the evicted rows in place through their
// indices). The gather is out of place: in place, a row could be overwritten before it is moved.
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

// Block (row r, KV head g); threads over the 16-bit words of the rows (every row type's size is even).
__global__ void gather_rows_kernel(KvLayerMut dst, KvLayerView src, const int32_t* idx, int64_t idx_ld, const int32_t* count) {
  const int r = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  if (r >= count[g]) return;
  const int j = idx[g * idx_ld + r];
  const int64_t wk = elem_row_bytes(src.type_k, src.head_dim) / 2, wv = elem_row_bytes(src.type_v, src.head_dim) / 2;
  const int64_t to = static_cast<int64_t>(g) * dst.capacity + r;
  const uint16_t* fk = reinterpret_cast<const uint16_t*>(src.krow(g, j));
  const uint16_t* fv = reinterpret_cast<const uint16_t*>(src.vrow(g, j));
  uint16_t* tk = reinterpret_cast<uint16_t*>(dst.k) + to * wk;
  uint16_t* tv = reinterpret_cast<uint16_t*>(dst.v) + to * wv;
  for (int64_t i = threadIdx.x; i < wk; i += blockDim.x) tk[i] = fk[i];
  for (int64_t i = threadIdx.x; i < wv; i += blockDim.x) tv[i] = fv[i];
  if (threadIdx.x == 0) dst.pos[to] = src.pos[static_cast<int64_t>(g) * src.capacity + j];
}

void partition_rows(int32_t* kept_idx, int32_t* n_kept, int32_t* evicted_idx, int32_t* n_evicted, const uint8_t* flags,
                    int64_t flags_ld, const int32_t* n_held, int n_kv_heads, int64_t idx_ld, Stream stream) {
  if (n_kv_heads <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_kv_heads)), dim3(kPartitionThreads), 0, stream, partition_rows_kernel)
  (kept_idx, n_kept, evicted_idx, n_evicted, flags, flags_ld, n_held, idx_ld);
  SLAKE_CHECK_LAUNCH("partition_rows_kernel");
}

void gather_rows(const KvLayerMut& dst, const KvLayerView& src, const int32_t* idx, int64_t idx_ld, const int32_t* count,
                 int max_count, Stream stream) {
  if (dst.type_k != src.type_k || dst.type_v != src.type_v || dst.head_dim != src.head_dim || dst.n_kv_heads != src.n_kv_heads)
    throw Error("gather_rows: the two caches differ in types or shape");
  if (max_count <= 0 || src.n_kv_heads <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(max_count), static_cast<unsigned>(src.n_kv_heads)), dim3(128), 0, stream,
               gather_rows_kernel)(dst, src, idx, idx_ld, count);
  SLAKE_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace slake::gpu
