// The recall store's page choice on the device (docs/algorithm.md §9.2, src/kv/kv_recall.cpp):
// each page scored by its keys' largest q . k (RecallScore::Keys, a q8_0 store's in integers as on
// the CPU), then per KV head the pages whose
// score relative to each query row's best is highest for some row. The chosen pages are attended
// with the exact cache by ptaa_decode (ptaa_decode.cuh, RecallView).
#pragma once
#include "common.cuh"
#include "topk.cuh"

namespace slake::gpu {

constexpr int kRecallThreads = 128;
constexpr int kRecallWarps = kRecallThreads / 32;
constexpr int kRecallRows = 8;  // query rows a warp scores per pass over a page's keys

// A q8_0 store's keys meet the query rounded to q8_0 blocks, in integer dot products, as the CPU
// scores them (RecallStore::key_scores_q8_0: quantize_q8_0 and dot_rows16_q8_0, whose block sums
// add up in block order as fma(sum, d_k d_q, acc)); other types meet the query in fp32.
// A warp per page, kRecallWarps pages a block, grid (pages / kRecallWarps, n_kv_heads): each key
// of the page is read once per kRecallRows query rows of its GQA group, its dot products summed
// across the warp's lanes.
__global__ void recall_page_scores_kernel(float* score, int64_t score_ld, const float* q, int group, KvLayerView store,
                                          int page, int score_pages, const int32_t* skip) {
  SLAKE_SHARED(int8_t, qq, kRecallWarps * kRecallRows * kMaxHeadDim);       // a warp's rows rounded to q8_0
  SLAKE_SHARED(float, qd, kRecallWarps * kRecallRows * (kMaxHeadDim / 32));  // and their blocks' scales
  const int g = static_cast<int>(blockIdx.y), d = store.head_dim, nb = d / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int p = static_cast<int>(blockIdx.x) * kRecallWarps + warp;
  if (p >= score_pages || (skip && skip[g])) return;  // warp-uniform
  const bool q8 = store.type_k == ElemType::Q8_0;
  int8_t* wq = qq + warp * kRecallRows * kMaxHeadDim;
  float* wd = qd + warp * kRecallRows * (kMaxHeadDim / 32);
  const int n = store.n_held[g], j0 = p * page, j1 = min(n, j0 + page);
  for (int r0 = 0; r0 < group; r0 += kRecallRows) {
    const int rn = min(kRecallRows, group - r0);
    if (q8) {  // quantize_q8_0 of each row: a block of 32 per pass of the warp
      for (int r = 0; r < rn; ++r)
        for (int b = 0; b < nb; ++b) {
          const float x = q[static_cast<int64_t>(g * group + r0 + r) * d + b * 32 + lane];
          const float dq = warp_max(fabsf(x)) / 127.0f, id = dq != 0.0f ? 1.0f / dq : 0.0f;
          wq[r * kMaxHeadDim + b * 32 + lane] = static_cast<int8_t>(rintf(x * id));
          if (lane == 0) wd[r * (kMaxHeadDim / 32) + b] = f16_bits_to_float(float_to_f16_bits(dq));
        }
      __syncwarp();
    }
    float top[kRecallRows];
    for (int r = 0; r < kRecallRows; ++r) top[r] = -INFINITY;
    for (int j = j0; j < j1; ++j) {
      const uint8_t* kj = store.krow(g, j);
      if (q8) {
        for (int r = 0; r < rn; ++r) {
          float acc = 0.0f;
          for (int b = 0; b < nb; ++b) {
            const uint8_t* blk = kj + b * 34;
            int s = static_cast<int>(static_cast<int8_t>(blk[2 + lane])) * wq[r * kMaxHeadDim + b * 32 + lane];
            for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(kFullMask, s, o);
            const float dk = f16_bits_to_float(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
            acc = fmaf(static_cast<float>(s), dk * wd[r * (kMaxHeadDim / 32) + b], acc);
          }
          top[r] = fmaxf(top[r], acc);
        }
        continue;
      }
      float dot[kRecallRows];
      for (int r = 0; r < kRecallRows; ++r) dot[r] = 0.0f;
      for (int i = lane; i < d; i += 32) {
        const float k = kv_elem(store.type_k, kj, i);
        for (int r = 0; r < rn; ++r) dot[r] += k * q[static_cast<int64_t>(g * group + r0 + r) * d + i];
      }
      for (int r = 0; r < rn; ++r) top[r] = fmaxf(top[r], warp_sum(dot[r]));
    }
    if (lane == 0)
      for (int r = 0; r < rn; ++r) score[static_cast<int64_t>(g * group + r0 + r) * score_ld + p] = top[r];
    if (q8) __syncwarp();  // the next rows overwrite wq
  }
}

// Block per KV head: rank[g * ld + (n_pages - 1 - p)] = max over head g's rows r of score[r][p] -
// max_p' score[r][p'], -inf past n_pages; head g's rows are g * head_rows + r, r < group. Reversed,
// so that topk_flags' ties to the lower index go to the later page, as rank_pages' do.
__global__ void recall_rank_kernel(float* rank, int64_t ld, const float* score, int64_t score_ld, int group, int64_t head_rows,
                                   KvLayerView store, int page, const int32_t* skip) {
  SLAKE_SHARED(float, red, 32);
  const int g = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int np = ceil_div(store.n_held[g], page);
  float* rk = rank + static_cast<int64_t>(g) * ld;
  for (int i = t; i < ld; i += nt) rk[i] = -INFINITY;
  if (skip && skip[g]) return;  // block-uniform
  for (int r = 0; r < group; ++r) {
    const float* sr = score + (g * head_rows + r) * score_ld;
    float top = -INFINITY;
    for (int p = t; p < np; p += nt) top = fmaxf(top, sr[p]);
    top = block_max(top, red);  // its barriers also order the writes to rk before the next row's reads
    for (int p = t; p < np; p += nt) rk[np - 1 - p] = fmaxf(rk[np - 1 - p], sr[p] - top);
  }
}

// Block per KV head: the flagged pages in increasing order (flags reversed as rank's) and their count.
__global__ void recall_list_kernel(int32_t* pages, int64_t pages_ld, int32_t* n_chosen, const uint8_t* flags, int64_t ld,
                                   KvLayerView store, int page, const int32_t* skip) {
  SLAKE_SHARED(int, scan, 33);
  const int g = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  if (skip && skip[g]) return;  // its pages and count are left as they are
  const int np = ceil_div(store.n_held[g], page);
  const uint8_t* f = flags + static_cast<int64_t>(g) * ld;
  int before = 0;
  for (int p0 = 0; p0 < np; p0 += nt) {
    const int p = p0 + t;
    const int on = p < np && f[np - 1 - p] ? 1 : 0;
    int chunk;
    const int at = before + block_exclusive_scan(on, scan, &chunk);
    if (on) pages[static_cast<int64_t>(g) * pages_ld + at] = p;
    before += chunk;
  }
  if (t == 0) n_chosen[g] = before;
}

// The pages the launches cover: those of max_rows rows (every head's n_held is at most that), or of
// the whole capacity.
int recall_score_pages(const KvLayerView& store, int page, int max_rows) {
  return ceil_div(max_rows >= 0 && max_rows < store.capacity ? max_rows : store.capacity, page);
}

void recall_page_scores(float* score, int64_t score_ld, const float* q, int n_heads, const KvLayerView& store, int page,
                        int max_rows, Stream stream, const int32_t* skip) {
  if (store.head_dim <= 0 || page <= 0 || n_heads % store.n_kv_heads != 0) throw Error("recall_page_scores: unsupported shape");
  const int score_pages = recall_score_pages(store, page, max_rows);
  if (score_pages <= 0) return;
  if (score_ld < score_pages) throw Error("recall_page_scores: score_ld below the store's pages");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(ceil_div(score_pages, kRecallWarps)), static_cast<unsigned>(store.n_kv_heads)),
               dim3(kRecallThreads), 0, stream, recall_page_scores_kernel)
  (score, score_ld, q, n_heads / store.n_kv_heads, store, page, score_pages, skip);
  SLAKE_CHECK_LAUNCH("recall_page_scores_kernel");
}

size_t recall_select_scratch_bytes(int n_kv_heads, int64_t score_ld) {
  return static_cast<size_t>(n_kv_heads) * static_cast<size_t>(score_ld) * (sizeof(float) + 1);
}

void recall_select(int32_t* pages, int64_t pages_ld, int32_t* n_chosen, const float* score, int64_t score_ld, int n_heads,
                   const KvLayerView& store, int page, int want, void* scratch, int max_rows, int64_t head_rows, Stream stream,
                   const int32_t* skip) {
  if (page <= 0 || n_heads % store.n_kv_heads != 0) throw Error("recall_select: unsupported shape");
  const int group = n_heads / store.n_kv_heads;
  if (head_rows == 0) head_rows = group;
  if (head_rows < group) throw Error("recall_select: head_rows below the group's rows");
  const int score_pages = recall_score_pages(store, page, max_rows);
  if (score_ld < score_pages || pages_ld < (want < score_pages ? want : score_pages))
    throw Error("recall_select: score_ld or pages_ld too small");
  float* rank = static_cast<float*>(scratch);
  uint8_t* flags = reinterpret_cast<uint8_t*>(rank + static_cast<int64_t>(store.n_kv_heads) * score_ld);
  const int H = store.n_kv_heads;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(H)), dim3(kRecallThreads), 0, stream, recall_rank_kernel)
  (rank, score_ld, score, score_ld, group, head_rows, store, page, skip);
  SLAKE_CHECK_LAUNCH("recall_rank_kernel");
  topk_flags(flags, rank, H, score_pages, score_ld, want, stream);
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(H)), dim3(kRecallThreads), 0, stream, recall_list_kernel)
  (pages, pages_ld, n_chosen, flags, score_ld, store, page, skip);
  SLAKE_CHECK_LAUNCH("recall_list_kernel");
}

// Held choices (--kv-recall-every; RecallStore::holds_choice, hold_choice and held_choice). Block
// per KV head g. The check: held[g] = 1 where g's choice has served fewer than `every` steps
// (0 < uses[g] < every) and each row r of its group meets q_r . u_r >= min_cos |q_r|, u_r the
// direction of the row's query that chose.
__global__ void recall_hold_check_kernel(int32_t* held, const float* q, int group, int d, RecallHold h, int every, float min_cos) {
  SLAKE_SHARED(float, red, 32);
  const int g = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int uses = h.uses[g];
  bool ok = uses > 0 && uses < every;  // uniform over the block, as the sums below
  for (int r = 0; r < group && ok; ++r) {
    const float* qr = q + static_cast<int64_t>(g * group + r) * d;
    const float* ur = h.u + static_cast<int64_t>(g * group + r) * d;
    float qq = 0.0f, qu = 0.0f;
    for (int i = t; i < d; i += nt) qq += qr[i] * qr[i], qu += qr[i] * ur[i];
    qq = block_sum(qq, red);
    qu = block_sum(qu, red);
    ok = qu >= min_cos * sqrtf(qq);
  }
  if (t == 0) held[g] = ok ? 1 : 0;
}

// After recall_select (which left a held head's pages alone): a held head attends its choice's
// pages before the one that was last when it was chosen, then every page from that one on (the
// rows written since), and counts the step; a head that chose keeps its choice, its store's page
// count and its rows' query directions for the steps after. pages_ld bounds the held list (the
// planner's bound, device_plan.cpp; past it a page would land in the next head's row).
__global__ void recall_hold_update_kernel(int32_t* pages, int64_t pages_ld, int32_t* n_chosen, const int32_t* held, RecallHold h,
                                          const float* q, int group, int d, KvLayerView store, int page) {
  SLAKE_SHARED(float, red, 32);
  const int g = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int np = ceil_div(store.n_held[g], page);
  int32_t* out = pages + static_cast<int64_t>(g) * pages_ld;
  int32_t* kept = h.pages + static_cast<int64_t>(g) * h.pages_ld;
  if (held[g]) {
    if (t == 0) {
      const int from = max(0, h.n_pages[g] - 1);
      int n = 0;
      for (int i = 0; i < h.count[g] && n < pages_ld; ++i)
        if (kept[i] < from) out[n++] = kept[i];
      for (int p = from; p < np && n < pages_ld; ++p) out[n++] = p;
      n_chosen[g] = n;
      h.uses[g] += 1;
    }
    return;
  }
  const int n = n_chosen[g];
  for (int i = t; i < n; i += nt) kept[i] = out[i];
  if (t == 0) h.count[g] = n, h.n_pages[g] = np, h.uses[g] = 1;
  for (int r = 0; r < group; ++r) {
    const float* qr = q + static_cast<int64_t>(g * group + r) * d;
    float* ur = h.u + static_cast<int64_t>(g * group + r) * d;
    float qq = 0.0f;
    for (int i = t; i < d; i += nt) qq += qr[i] * qr[i];
    const float norm = sqrtf(block_sum(qq, red)), inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (int i = t; i < d; i += nt) ur[i] = qr[i] * inv;
  }
}

void recall_hold_check(int32_t* held, const float* q, int n_heads, int n_kv_heads, int head_dim, const RecallHold& h, int every,
                       float min_cos, Stream stream) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || head_dim <= 0) throw Error("recall_hold_check: unsupported shape");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_kv_heads)), dim3(kRecallThreads), 0, stream, recall_hold_check_kernel)
  (held, q, n_heads / n_kv_heads, head_dim, h, every, min_cos);
  SLAKE_CHECK_LAUNCH("recall_hold_check_kernel");
}

void recall_hold_update(int32_t* pages, int64_t pages_ld, int32_t* n_chosen, const int32_t* held, const RecallHold& h, const float* q,
                        int n_heads, const KvLayerView& store, int page, Stream stream) {
  if (page <= 0 || n_heads % store.n_kv_heads != 0) throw Error("recall_hold_update: unsupported shape");
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(store.n_kv_heads)), dim3(kRecallThreads), 0, stream, recall_hold_update_kernel)
  (pages, pages_ld, n_chosen, held, h, q, n_heads / store.n_kv_heads, store.head_dim, store, page);
  SLAKE_CHECK_LAUNCH("recall_hold_update_kernel");
}

}  // namespace slake::gpu
