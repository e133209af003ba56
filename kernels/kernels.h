// The host API of the CUDA kernels: one launcher per kernel, all pointers device pointers, all
// launches asynchronous on `stream`. The same declarations are implemented twice: by nvcc
// (kernels.cu, library slake-cuda-kernels) and by the host compiler on the block executor
// (emu/kernels_emu.cpp, library slake-kernels-emu). Math and accumulation are fp32.
#pragma once
#include <cstdint>

#include "cuda_compat.h"

namespace slake::gpu {

// Element types of tables and KV cache rows the kernels read (values as in slake::DType). Q8_0:
// blocks of 32 values, an f16 scale and 32 int8 (ggml's block_q8_0), for KV rows only.
enum class ElemType : int { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30 };

// Bytes of one row of n values of type t (n a multiple of 32 for Q8_0), as slake::kv_row_bytes.
inline __host__ __device__ int64_t elem_row_bytes(ElemType t, int n) {
  const int64_t m = n;
  if (t == ElemType::F32) return 4 * m;
  if (t == ElemType::Q8_0) return m / 32 * 34;
  return 2 * m;  // F16, BF16
}

// ---- elementwise (embedding.cuh, rmsnorm.cuh, rope.cuh, swiglu.cuh, residual.cuh) ----

// out[t][:] = table row tokens[t] (dim elements of `type`), as fp32, times scale.
void embedding(float* out, const void* table, ElemType type, const int32_t* tokens, int n_tokens, int dim, float scale = 1.0f,
               Stream stream = nullptr);
// out[r][i] = x[r][i] / rms(x[r]) * weight[i] for r < rows, i < n.
void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps, Stream stream = nullptr);
// Rotates, in place, n_heads heads (head_dim each, consecutive) of each of n_tokens rows of x
// (row t starts at x + t * row_stride) for position pos[t]. inv_freq: head_dim / 2 doubles (the
// frequencies with any Llama 3.1 / linear scaling already divided in, as slake::Rope::inv_freq()).
// half_layout: pairs (i, i + d/2) (Hugging Face); otherwise adjacent pairs (2i, 2i+1) (GGUF).
// mscale multiplies cos and sin (LongRoPE's attention factor, Rope::mscale()).
void rope(float* x, const int32_t* pos, int n_tokens, int64_t row_stride, int n_heads, int head_dim,
          const double* inv_freq, bool half_layout, float mscale = 1.0f, Stream stream = nullptr);
// out[i] = silu(gate[i]) * up[i]
void swiglu(float* out, const float* gate, const float* up, int64_t n, Stream stream = nullptr);
// out[i] = gelu(gate[i]) * up[i], GELU's tanh approximation
void geglu(float* out, const float* gate, const float* up, int64_t n, Stream stream = nullptr);
// x[i] += y[i]
void residual_add(float* x, const float* y, int64_t n, Stream stream = nullptr);
// x[r][i] += b[i] for `rows` rows of `width` floats (a bias on every row).
void bias_add(float* x, const float* b, int rows, int64_t width, Stream stream = nullptr);
// out[r][:] = in[idx[r]][:] for r < m (rows of `width` floats): one expert's rows of a mixture.
void gather_rows(float* out, const float* in, const int32_t* idx, int m, int64_t width, Stream stream = nullptr);
// acc[idx[r]][:] += w[r] * y[r][:] for r < m; the idx[r] must be distinct.
void scatter_add_rows(float* acc, const float* y, const int32_t* idx, const float* w, int m, int64_t width,
                      Stream stream = nullptr);

// ---- the exact cache and the linear state of one layer, as the attention kernels read them ----

constexpr int kMaxHeadDim = 256;  // the attention kernels' limit on head_dim (at most 256, even)

// Keys and values of every KV head of a layer, stored rows of type_k / type_v (F32, F16, BF16 or
// Q8_0; slake::KvCache's row layouts): head g's key row j at k + (g * capacity + j) *
// elem_row_bytes(type_k, head_dim) (krow), its value row likewise (vrow), its position at
// pos[g * capacity + j]; n_held[g] rows held (each head its own count). The kernels read the stored
// rows directly (kv_elem in common.cuh), a tile or a row at a time, and move them as bytes.
struct KvLayerView {
  const uint8_t* k;
  const uint8_t* v;
  const int32_t* pos;
  const int32_t* n_held;
  int n_kv_heads, capacity, head_dim;
  ElemType type_k, type_v;
  // The model's attention logit soft-cap (ModelConfig::attn_softcap, 0: none), which every kernel
  // that scores this cache's keys applies (cap_logit, common.cuh).
  float softcap = 0.0f;
  __host__ __device__ const uint8_t* krow(int g, int j) const {
    return k + (static_cast<int64_t>(g) * capacity + j) * elem_row_bytes(type_k, head_dim);
  }
  __host__ __device__ const uint8_t* vrow(int g, int j) const {
    return v + (static_cast<int64_t>(g) * capacity + j) * elem_row_bytes(type_v, head_dim);
  }
};

// The linear (Taylor) states of a layer's KV heads: n[g], ksum[g][d], vsum[g][d], M[g][d][d]
// with M[i][j] = sum k_i v_j (slake::LinearState, one per head, packed); the attention kernels
// (ptaa_decode, prefill_attention) add whichever term the state holds.
struct LinearStateView {
  float* n;
  float* ksum;
  float* vsum;
  float* M;
  // The centroid compensator instead (centroids > 0; ksum, vsum and M null): per KV head, cn [K]
  // tokens per centroid, ck and cv [K][d] the sums of their keys and values.
  int centroids = 0;
  float* cn = nullptr;
  float* ck = nullptr;
  float* cv = nullptr;
};

// ---- the recall store (recall.cuh; docs/algorithm.md §9) ----

// A layer's recall stores as the attention kernels read them: `store` holds each KV head's evicted
// rows in the order they were evicted (the layout of KvLayerView; n_held: the rows each head's store holds,
// type_k = type_v: the store's row type), in pages of `page` rows (page p: rows p * page ..);
// the pages each head attends are pages[g * pages_ld + i], i < n_chosen[g] (recall_select's
// output), at most max_chosen of them (0: no recall). pages_per_split is the launcher's.
struct RecallView {
  KvLayerView store{};
  int page = 0;
  const int32_t* pages = nullptr;
  int64_t pages_ld = 0;
  const int32_t* n_chosen = nullptr;
  int max_chosen = 0;
  int pages_per_split = 1;
};

// RecallScore::Keys on the device: score[h * score_ld + p] = the largest q_h . k_j over the keys
// j of page p of KV head h / (n_heads / n_kv_heads)'s store (unscaled, as stored; -inf for the
// pages past that head's last), for p < ceil(R / page) <= score_ld, R the capacity or max_rows
// when given (>= every head's n_held: the rows the host knows are stored). A q8_0 store's keys
// meet q_h rounded to q8_0 blocks in integer dot products, as RecallStore::key_scores_q8_0 scores
// them (bit for bit where the CPU's kernel adds the blocks' sums in order: AVX-512 VNNI).
// skip (optional, a flag per KV head): heads whose scores are not needed (a held choice).
void recall_page_scores(float* score, int64_t score_ld, const float* q, int n_heads, const KvLayerView& store, int page,
                        int max_rows = -1, Stream stream = nullptr, const int32_t* skip = nullptr);
// RecallStore::select_scored's rule for Keys on those scores: per KV head g, of its
// n_pages = ceil(n_held[g] / page) pages the `want` whose score relative to each of its query
// rows' best is highest for some row (ties to the later page), into pages[g * pages_ld ..] in
// increasing order, n_chosen[g] of them (every page when want >= n_pages). Head g's query rows
// are score rows g * head_rows + r, r < n_heads / n_kv_heads (head_rows 0: that group, adjacent;
// more: one token's rows among several tokens' scored together). scratch:
// recall_select_scratch_bytes() bytes (the ranks, reversed, and topk_flags' flags). A head
// flagged in skip keeps its pages and n_chosen as they were.
size_t recall_select_scratch_bytes(int n_kv_heads, int64_t score_ld);
void recall_select(int32_t* pages, int64_t pages_ld, int32_t* n_chosen, const float* score, int64_t score_ld, int n_heads,
                   const KvLayerView& store, int page, int want, void* scratch, int max_rows = -1, int64_t head_rows = 0,
                   Stream stream = nullptr, const int32_t* skip = nullptr);

// A decode step's choice held for the steps after it (--kv-recall-every; RecallStore::holds_choice,
// hold_choice, held_choice), per KV head g of a layer: uses[g] (the steps the choice has served;
// 0: none), n_pages[g] (the store's pages when it was chosen), count[g] and pages[g * pages_ld ..]
// (the pages chosen, increasing) and u[(g * group + r) * head_dim ..] (the direction of each of
// the group's query rows then).
struct RecallHold {
  int32_t* uses = nullptr;
  int32_t* n_pages = nullptr;
  int32_t* count = nullptr;
  int32_t* pages = nullptr;
  int64_t pages_ld = 0;
  float* u = nullptr;
};
// held[g] = 1 where head g's choice may serve the step of queries q (rows g * group ..): it has
// served fewer than `every` steps and each row's cosine with its direction then is at least min_cos.
void recall_hold_check(int32_t* held, const float* q, int n_heads, int n_kv_heads, int head_dim, const RecallHold& h, int every,
                       float min_cos, Stream stream = nullptr);
// After recall_page_scores and recall_select with skip = held: a held head's pages become the
// choice's before the page that was last when it was chosen and every page from that one on
// (pages_ld at least h.pages_ld + 1 + the pages the store gained since, or the list is cut
// there), and its use is counted; every other head's new choice and query directions are kept in h.
void recall_hold_update(int32_t* pages, int64_t pages_ld, int32_t* n_chosen, const int32_t* held, const RecallHold& h, const float* q,
                        int n_heads, const KvLayerView& store, int page, Stream stream = nullptr);

// ---- PTAA decode (ptaa_decode.cuh) ----

// The split step: each of `n_splits` blocks per query head covers split_len retained tokens and
// writes a partial (max, sum, unnormalised accumulator); the merge adds the Taylor term of the
// linear state and normalises. The scratch buffer holds ptaa_scratch_floats() floats.
int ptaa_splits(int max_held, int split_len);
size_t ptaa_scratch_floats(int n_heads, int head_dim, int n_splits);
// out[h] (head_dim floats per query head h < n_heads) for the roped queries q[h] at position qpos:
// slake::ptaa_one of query head h over KV head h / (n_heads / n_kv_heads). `lin` may have n = 0
// heads (exact attention there); pass lin.n == nullptr for none at all. max_held >= every n_held.
void ptaa_decode(float* out, const float* q, int32_t qpos, int n_heads, const KvLayerView& kv, const LinearStateView& lin,
                 int sliding_window, int max_held, int split_len, float* scratch, Stream stream = nullptr);
// The same with the pages each KV head recalls (RecallView) attended in the same softmax, as the
// CPU's attention_decode with a recall store gives it (RecallStore::attend merged with the exact
// part). No linear state (lin.n null): the Taylor cover of what is not recalled is the CPU's.
// Scratch: ptaa_scratch_floats(n_heads, head_dim, ptaa_splits(max_held, split_len, recall)).
int ptaa_splits(int max_held, int split_len, const RecallView& recall);
void ptaa_decode(float* out, const float* q, int32_t qpos, int n_heads, const KvLayerView& kv, const LinearStateView& lin,
                 int sliding_window, int max_held, int split_len, float* scratch, const RecallView& recall,
                 Stream stream = nullptr);

// ---- prefill attention (prefill_attention.cuh) ----

// out[t] + h * head_dim (row stride out_stride) = attention of query row t, head h (q + t *
// q_stride + h * head_dim, position qpos[t]) over the keys of KV head h / (n_heads / n_kv_heads)
// visible from qpos[t] (causal; sliding window if > 0), with the Taylor term of that head's linear
// state when it holds anything: slake::attention_prefill. Keys must be in position order.
void prefill_attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, const int32_t* qpos, int n_q,
                       int n_heads, const KvLayerView& kv, const LinearStateView& lin, int sliding_window,
                       Stream stream = nullptr);

// ---- observation-window statistics (window_stats.cuh) ----

// slake::window_stats on the device, in double like the CPU. The layer's cache holds S rows per KV
// head in position order: the whole prompt, or (a prompt prefilled in chunks) what the chunks
// before kept and the last chunk. Its last rows are consecutive positions, and q_window holds the
// queries of the last `n_obs` of them ([n_obs][n_heads * head_dim], roped): query i sees rows
// 0 .. S - n_obs + i. They score the candidate rows 0 .. P - 1 (P <= S - n_obs). Writes
// indicator[g * P + j] (float, row j's, pooled over neighbouring rows) and totals[0] = entropy Hn,
// totals[1] = variance Vr. pool: 0 average of 5, 1 maximum of 7.
size_t window_stats_scratch_doubles(int n_heads, int n_obs, int P);
void window_stats(float* indicator, double* totals, const float* q_window, int S, int n_obs, int P, int n_heads,
                  const KvLayerView& kv, double gamma, int pool, double* scratch, Stream stream = nullptr);

// ---- the linear state (linear_state.cuh) ----

// Decode: for each KV head g with row[g] >= 0, absorbs that row of the layer's K and V (rank-1).
void linear_absorb_one(const LinearStateView& lin, const KvLayerView& kv, const int32_t* row, Stream stream = nullptr);
// Prefill: absorbs rows idx[g * idx_ld + t], t < count[g], of head g of `kv` (read as stored, the
// evicted rows of a compaction: partition_rows): M += K^T V (tiled kernel), ksum, vsum, n.
void linear_absorb_rows(const LinearStateView& lin, const KvLayerView& kv, const int32_t* idx, int64_t idx_ld,
                        const int32_t* count, Stream stream = nullptr);
// Only the sums and counts of the above (for callers that form M += K^T V with cuBLAS: absorb_gemm).
void linear_state_sums(const LinearStateView& lin, const KvLayerView& kv, const int32_t* idx, int64_t idx_ld,
                       const int32_t* count, Stream stream = nullptr);

// ---- the centroid compensator (centroids.cuh) ----

// As linear_absorb_rows and linear_absorb_one for a centroid state (lin.centroids > 0): each row
// joins the first unseeded centroid, else the nearest by mean key, in order (slake::LinearState).
void centroid_absorb_rows(const LinearStateView& lin, const KvLayerView& kv, const int32_t* idx, int64_t idx_ld,
                          const int32_t* count, Stream stream = nullptr);
void centroid_absorb_one(const LinearStateView& lin, const KvLayerView& kv, const int32_t* row, Stream stream = nullptr);

// ---- eviction: top-k selection (topk.cuh) and compaction (compact.cuh) ----

// For each KV head g < n_kv_heads: flags[g * ld + j] = 1 for the `keep` best of
// scores[g * ld + j], j < n, else 0; ties go to the lower index (slake::top_k_flags). Scores must
// not be NaN (-0 and +0 are equal).
void topk_flags(uint8_t* flags, const float* scores, int n_kv_heads, int n, int64_t ld, int64_t keep,
                Stream stream = nullptr);
// For each KV head g, the indices j < n_held[g], in order, of its flagged rows (flags[g * flags_ld
// + j] != 0) in kept_idx[g * idx_ld ...] (n_kept[g] of them) and of the others in evicted_idx
// (n_evicted[g]).
void partition_rows(int32_t* kept_idx, int32_t* n_kept, int32_t* evicted_idx, int32_t* n_evicted, const uint8_t* flags,
                    int64_t flags_ld, const int32_t* n_held, int n_kv_heads, int64_t idx_ld, Stream stream = nullptr);
// A layer's cache, writable (the layout of KvLayerView, dst.capacity rows per head).
struct KvLayerMut {
  uint8_t* k;
  uint8_t* v;
  int32_t* pos;
  int n_kv_heads, capacity, head_dim;
  ElemType type_k, type_v;
};
// Row r < count[g] of head g of dst = row idx[g * idx_ld + r] of `src`: key, value and position,
// moved as stored bytes (the two caches have the same types). max_count >= every count.
void gather_rows(const KvLayerMut& dst, const KvLayerView& src, const int32_t* idx, int64_t idx_ld, const int32_t* count,
                 int max_count, Stream stream = nullptr);

// ---- the device forward pass's own kernels (backend_kernels.cuh) ----

// out[i] = x[i] rounded to bf16 (nearest even), as slake::fp32_to_bf16.
void to_bf16(uint16_t* out, const float* x, int64_t n, Stream stream = nullptr);
// p[0..n) = value.
void fill_i32(int32_t* p, int32_t value, int n, Stream stream = nullptr);
// Row row0 + t of every KV head g = k[t * src_stride + g * head_dim ...] (and v) stored as the
// cache's types (rounded to nearest even for F16/BF16; Q8_0 as slake::kv_store_row), position pos[t].
void kv_append(const KvLayerMut& kv, int row0, const float* k, const float* v, int64_t src_stride, const int32_t* pos,
               int n_tokens, Stream stream = nullptr);
// The recall store takes evicted rows (docs/algorithm.md §9): row row0 + r < row0 + count of every
// KV head g of `store` (its own row type, the layout of KvLayerMut) = row idx[g * idx_ld + r] of
// `src` with its position, read as floats and stored as the store's type (RecallStore::add).
void store_rows(const KvLayerMut& store, int row0, const KvLayerView& src, const int32_t* idx, int64_t idx_ld, int count,
                Stream stream = nullptr);
// The same for one row a head, row[g] (a decode step's victims; none where row[g] < 0), into row row0.
void store_row_each(const KvLayerMut& store, int row0, const KvLayerView& src, const int32_t* row, Stream stream = nullptr);
// The other way, for a prompt chunk's attention (the CPU's chunk_pages and recalled_rows): the rows
// of the pages each KV head g chose (recall_select's pages[g * pages_ld + i], i < n_chosen[g] <=
// max_pages) in page order into rows row0.. of head g of dst, read as floats and stored as dst's
// types, with their positions; n_held[g] (dst's held rows, device memory) = row0 + their count.
void recall_gather(const KvLayerMut& dst, int row0, int32_t* n_held, const KvLayerView& store, int page, const int32_t* pages,
                   int64_t pages_ld, const int32_t* n_chosen, int max_pages, Stream stream = nullptr);
// out[g * ld + r] = indicator[g * P + pos of row r of head g], r < n_cand: the prefill scores of a
// layer's candidate rows (slake::KvEvictor::evict_to).
void gather_scores(float* out, int64_t ld, const float* indicator, int P, const KvLayerView& kv, int n_cand, Stream stream = nullptr);
// Its inverse: indicator[g * P + pos of row r of head g] = rows[g * n_cand + r], r < n_cand (the
// rows' positions below P): window_stats' per-row scores kept by position, so that they still
// name their tokens after the layer's rows move (a chunked prefill's cache has gaps in position).
void scatter_scores(float* indicator, int P, const float* rows, const KvLayerView& kv, int n_cand, Stream stream = nullptr);
// SLAKE's VABS terms per (observing query i, query head h): out[(i * n_heads + h) * 2] = tv_va and
// [.. + 1] = entropy, as one step of slake::vabs_terms (q_window, n_obs and P as for
// window_stats, in rows); kept[g * P + j] flags the candidate rows a uniform budget keeps.
void vabs_terms(double* out, const float* q_window, int S, int n_obs, int P, int n_heads, const KvLayerView& kv,
                const uint8_t* kept, Stream stream = nullptr);
// The decode victim of every KV head among its first n_cand rows (slake::KvEvictor::decode_victim):
// mode 0 attention average-pooled over 5 (cake, slake), 1 max-pooled over 7 (snapkv, pyramidkv),
// 2 recency with 4 sinks (streaming). scratch: victim_scratch_doubles() (the logits of every query
// head and row, computed once in a grid over both, then the per-KV-head softmax and pooling).
size_t victim_scratch_doubles(int n_heads, int n_kv_heads, int capacity);
void decode_victims(int32_t* victim, double* scratch, const float* q, int32_t qpos, int n_heads, const KvLayerView& kv, int n_cand,
                    int mode, Stream stream = nullptr);
// Removes row[g] (when >= 0) from each KV head g holding n_held rows, keeping the order: the rows
// after it go out to `scratch` (the same heads, head_dim and types, capacity >= n_held) and back
// one row up, each in a grid over rows.
void remove_rows(const KvLayerMut& kv, const KvLayerMut& scratch, const int32_t* row, int n_held, Stream stream = nullptr);
// Rows row[g] + 1 .. n_held - 1 of each KV head g (row[g] >= by - 1) move `by` rows up, through
// `scratch` as remove_rows (which is by = 1): a local layer drops its oldest `by` rows with
// row[g] = by - 1.
void shift_rows_up(const KvLayerMut& kv, const KvLayerMut& scratch, const int32_t* row, int n_held, int by,
                   Stream stream = nullptr);

// ---- argmax (argmax.cuh) ----

// out[r] = the index of the largest of x[r][0..n) (the first such index on ties).
void argmax(int32_t* out, const float* x, int rows, int n, Stream stream = nullptr);

}  // namespace slake::gpu
