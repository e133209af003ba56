// The CPU attention kernel: flash attention for a block of up to kLanes query rows that read the
// same KV head (a GQA group, and several tokens of a prompt). The rows are the lanes of a vector
// (lanes.h): each key and value is loaded once for the whole block, scores for 16 keys at a time
// sit in 16 registers, and the online softmax runs lane-wise with a vectorised exponential. It
// needs no horizontal reductions, and no transposed copy of the cache.
// A block of at most kFewRows rows (a decode token's GQA group: 3 query heads in SmolLM2, 4 in
// Llama 3 and Mistral) would leave most lanes idle, so with AVX-512 or AVX2 it runs the other way
// round: lanes over head dimensions for the dot products (16 or 8 of them summed across lanes at
// once) and over 16 keys for the softmax, and the P V product row by row over head dimensions.
// Same results up to rounding.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "slake/kv/kv_cache.h"
#include "slake/cpu/lanes.h"

namespace slake {

// The exact part of attention for `n` (<= kLanes) query rows q[r] (head_dim floats, after RoPE)
// at positions qpos[r], before normalisation, over the keys of `kv` visible from qpos[r] (causal;
// inside the sliding window when window > 0). With x_j = q . k_j / sqrt(d), soft-capped when
// softcap > 0 (x_j = softcap * tanh(x_j / softcap), slake/model/softcap.h):
//   m[r] = max_j x_j,  l[r] = sum_j exp(x_j - m[r]),  acc[r * d + i] = sum_j exp(x_j - m[r]) v_j[i].
// A row that sees no key gets m = -inf, l = 0 and acc = 0. The keys must be in position order,
// as the cache keeps them.
void attend_rows(const float* const* q, const int32_t* qpos, int n, const KvHead& kv, int head_dim, int window,
                 float softcap, float* acc, float* m, float* l);

// Lane j: q . k_j for the 16 keys of a tile, rows of d floats from k (d a multiple of 16): the dot
// products summed across lanes 16 at a time, as the few-rows kernel scores a tile.
lanes_f score_tile_of_keys(const float* q, const float* k, int d);

// Rows kept elsewhere in pages (a recall store's chosen pages, kv_recall.h): page pages[i] (i <
// n_pages) holds rows page * pages[i] .. of k and v (stored as `type`, row_bytes each) and pos, up
// to the store's n_rows; the pages are increasing, and only the last may be short. A tile inside
// one page (always, with pages of a multiple of 16) is read as a run; one across pages row by row.
// Positions need not be in order.
struct PagedRows {
  KvType type;
  const uint8_t* k;
  const uint8_t* v;
  size_t row_bytes;
  const int32_t* pos;
  int n_rows, page;
  const int* pages;
  int n_pages;
};

// attend_rows in steps, so that several blocks can take the same keys while they are in cache:
// begin, then attend over consecutive key ranges (any split of key_range gives the same
// result up to rounding), then finish.
class RowBlock {
 public:
  // softcap: attend_rows'.
  void begin(const float* const* q, const int32_t* qpos, int n, int head_dim, float softcap);
  // The keys of `kv` some row of the block can see: [first, second).
  std::pair<int, int> key_range(const KvHead& kv, int window) const;
  // Takes keys [j_begin, j_end) of `kv` (within key_range) into the online softmax.
  void attend(const KvHead& kv, int window, int j_begin, int j_end);
  // attend with the scores given: x[j] as scores() writes it, for every row j of `kv` (decode
  // scores its query once for eviction and attention alike, algorithm.md §5.2). Keys are not read.
  void attend_scored(const KvHead& kv, const lanes_f* x, int window, int j_begin, int j_end);
  // Takes every row of `rows` into the online softmax, each key visible to each row by position
  // (causal; inside the sliding window when window > 0), read in place, a page's tile at a time.
  void attend_paged(const PagedRows& rows, int window);
  void finish(float* acc, float* m, float* l) const;
  // Instead of attending: x[j] = q_r . k_j / sqrt(d) in lane r for keys j < n_keys (soft-capped
  // as begin() says), -inf where key j is after qpos[r] (causal, no window).
  void scores(const KvHead& kv, int n_keys, lanes_f* x) const;

 private:
  // Src: where the tiles' rows come from (a head, or pages: attention_rows.cpp).
  template <class Src>
  void attend_tiles(const Src& src, const lanes_f* x, int window, int j_begin, int j_end);
  template <class Src>
  void attend_tiles_few(const Src& src, const lanes_f* x, int window, int j_begin, int j_end);
  void scores_few(const KvHead& kv, int n_keys, lanes_f* x) const;

  // The raw scores s of a tile soft-capped, when the block caps.
  lanes_f capped(lanes_f s) const { return cap_ > 0.0f ? lanes_soft_cap(s, cap_) : s; }

  int n_ = 0, d_ = 0;
  float cap_ = 0.0f;
  bool few_ = false;                // the few-rows kernel: q_r_ and acc_r_ instead of q_t_ and acc_t_
  std::vector<float> q_r_, acc_r_;  // [n][d]: pre-scaled queries and accumulators, row-major
  std::vector<lanes_f> q_t_, acc_t_;  // transposed, pre-scaled queries and accumulators: [d] lanes
  lanes_f m_{}, l_{};
  lanes_i qp_{};
  int32_t q_min_ = 0, q_max_ = 0;
};

}  // namespace slake
