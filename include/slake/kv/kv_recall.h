// The recall store (algorithm.md §9): the second tier of a head's cache. Every token the policy
// evicts from the exact cache lands here instead of being dropped, in pages of a fixed number of
// tokens stored in a compact row type (kv_type.h). At each query every page gets a score, the
// largest q . k_j of its keys (RecallScore::Keys) or the bound of a summary of them, the
// per-channel minimum and maximum (RecallScore::Quest; Tang et al., ICML 2024),
//   U(q, page) = sum_i max(q_i min_i, q_i max_i)  >=  q . k_j for every key j of the page,
// or the keys' largest score over a shortlist the bound chose (RecallScore::Shortlist) or a
// low-rank projection of the keys chose (RecallScore::Lowrank), and the P pages of highest score
// are attended exactly, in one softmax with the exact cache.
// The rest of the store is left out, or covered by the Taylor state of the head minus what was
// recalled (RecallCover, ptaa.h).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "slake/kv/key_basis.h"
#include "slake/kv/kv_type.h"
#include "slake/kv/store_memory.h"
#include "slake/state_archive.h"

namespace slake {

// How a query ranks the pages of a store (algorithm.md §9.2):
//   Keys:  by the largest score q . k_j of the page's keys, read from the store (every stored key
//          is read at each step, the values only of the pages chosen);
//   Quest: by the bound of the page's summary (only the summaries are read);
//   Shortlist: the kShortlist * P pages of highest bound, re-ranked by their keys' largest score
//          (the summaries read, and the keys of the shortlisted pages only);
//   Lowrank: the kShortlist * P pages whose keys score highest in d / kLowrankDiv coordinates
//          (key_basis.h: the leading directions of the store's first kFitKeysPerDim * d keys, each
//          key's coordinates in int8), re-ranked by their keys' largest score (the coordinates
//          read, a quarter of the keys' bytes, and the keys of the shortlisted pages only). Until
//          the store holds enough keys to fit the basis it ranks as Keys.
enum class RecallScore { Keys, Quest, Shortlist, Lowrank };
const std::vector<std::string>& recall_score_names();  // "keys", "quest", "shortlist", "lowrank"
// Throws slake::Error naming the known ones.
RecallScore parse_recall_score(const std::string& name);
const char* recall_score_name(RecallScore s);

// The rows of a prompt chunk after the first recall pages per attention call (the chunk, or its
// batch of n_batch tokens): the call's last kChunkRecallTokens tokens (a chunk's observing window,
// where a prompt's question stands) choose their own, one token at a time as decode steps do, and
// their queries together choose the pages every earlier row of the call attends (algorithm.md §9.2).
constexpr int kChunkRecallTokens = 32;

// A cache's recall settings (KvPolicyParams::recall_*): `pages` pages attended per query and KV
// head (0: no store, evicted tokens are dropped or absorbed as before), `page` tokens a page, rows
// stored as `type`, pages ranked by `score`.
struct RecallConfig {
  int pages = 0;
  int page = 16;
  KvType type = KvType::Q8_0;
  RecallScore score = RecallScore::Keys;
  // --kv-store-file: the stores' rows in mapped files of this directory (store_memory.h); null:
  // on the heap. Where the rows live, not what they are: not in state files.
  std::shared_ptr<const std::string> file_dir = nullptr;
  // --kv-recall-every: a decode step scores the store and chooses its pages once every `every`
  // steps of a head; the steps between attend the pages the last choice made (1: every step).
  int every = 1;
  bool on() const { return pages > 0; }
  // The fields that say what the store holds and how it is read, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(pages, page, type, score, every);
  }
};

// What one recall attended for one query row, for the Taylor state of the rest (ptaa.h): the
// recalled rows' count, raw scores x_j = q . k_j / sqrt(d) summed, values summed, and x_j v_j summed.
struct RecallCover {
  float n = 0.0f;
  float sx = 0.0f;
  const float* vs = nullptr;  // [d]
  const float* xv = nullptr;  // [d]
};

class RecallStore {
 public:
  RecallStore() = default;
  // page tokens per page, rows stored as `type` (a row type: f32, f16, bf16, q8_0 or q4_0), pages
  // ranked by `score`; the rows in mapped files of `file_dir` when given (store_memory.h).
  RecallStore(int head_dim, int page, KvType type, RecallScore score = RecallScore::Keys,
              std::shared_ptr<const std::string> file_dir = nullptr);
  // A copy of a mapped store (a saved state, a slot's copy) is made in files of its own; it and
  // the store it was read from are given back to the page cache whole: nothing reads them yet.
  RecallStore(const RecallStore& o);
  RecallStore& operator=(const RecallStore& o);
  RecallStore(RecallStore&& o) noexcept;
  RecallStore& operator=(RecallStore&& o) noexcept;
  // Moves the rows to mapped files of `dir` (null: the heap), e.g. after a state file was read.
  void keep_rows_in(std::shared_ptr<const std::string> dir);
  bool file_backed() const { return k_.get_allocator().file_backed(); }
  // A mapped store gives the pages queries read back to the page cache every this many reads
  // (attention calls: count_read), and the pages it wrote every this many pages, in one call: each
  // costs a page-table walk and a TLB flush on every core the process runs on, and a read faults in
  // its neighbours as well (the kernel's fault-around).
  static constexpr int kReleaseEvery = 16;
  // One attention call (a decode step's rows, or all the blocks of a prompt chunk's call) has read
  // the store (through attend(), or load() of the pages a chunk's call chose): a mapped store gives
  // its pages back every kReleaseEvery calls.
  void count_read() const noexcept;
  bool active() const { return page_ > 0; }
  int n() const { return n_; }
  int page() const { return page_; }
  int n_pages() const { return page_ > 0 ? (n_ + page_ - 1) / page_ : 0; }
  // Tokens in page p (page_ but for the last).
  int page_tokens(int p) const { return std::min(page_, n_ - p * page_); }
  KvType type() const { return type_; }

  // Appends an evicted token (key after RoPE, value) at position pos to the last page.
  void add(const float* k, const float* v, int32_t pos);
  void clear();
  // Bytes in use: stored rows, positions, the pages' summaries (Quest, Shortlist) and Lowrank's
  // basis and keys' coordinates once fitted.
  size_t bytes() const;
  // Bytes a store of `tokens` tokens takes (for planning).
  static size_t planned_bytes(int head_dim, int page, KvType type, int64_t tokens, RecallScore score);

  // Shortlist, Lowrank: the pages the first pass shortlists, per page attended.
  static constexpr int kShortlist = 4;
  // Lowrank: the coordinates a key keeps (d / kLowrankDiv), and the keys the basis is fitted from
  // (kFitKeysPerDim * d, the store's first ones).
  static constexpr int kLowrankDiv = 4;
  static constexpr int kFitKeysPerDim = 16;
  // Lowrank: the basis, once fitted (not before the store holds kFitKeysPerDim * d keys).
  const KeyBasis& key_basis() const { return basis_; }
  // Lowrank: key j's coordinates as stored, read back (key_basis().r floats); a fitted store only.
  void key_coords(int j, float* c) const;

  // The Quest bound of each page for query q (head_dim floats, unscaled): bound[p] (n_pages()).
  void page_bounds(const float* q, float* bound) const;
  // The first-pass score of pages [p0, p1) for the `rows` queries q[r] (unscaled): the bound
  // (Quest, Shortlist), the keys' largest q . k_j (Keys, and Lowrank before its basis is fitted)
  // or the keys' largest score in the basis' int8 coordinates (Lowrank; q . mu left out), into
  // score[r * n_pages() + p].
  // Distinct page ranges may be scored concurrently.
  void page_scores(const float* const* q, int rows, int p0, int p1, float* score) const;
  // The keys' largest q . k_j of each of the n pages `pages` (each page's keys read once for all
  // rows), into score[r * n_pages() + pages[i]]; a q8_0 store's keys against the query rounded to
  // q8_0 blocks, in integer dot products.
  void key_scores(const float* const* q, int rows, const int* pages, int n, float* score) const;
  // The pages to attend for the `rows` queries q[r] of one KV head: the `want` pages whose score,
  // relative to each row's best page, is highest for some row (Shortlist: of the kShortlist * want
  // pages so chosen by the bound, by their keys); increasing page order.
  void select(const float* const* q, int rows, int want, std::vector<int>* pages) const;
  // select from the first-pass scores page_scores wrote for every page.
  void select_scored(const float* const* q, const float* score, int rows, int want, std::vector<int>* pages) const;

  // Decode's choice kept for the next steps (RecallConfig::every): whether the pages the last
  // decode step chose may serve this one, the `rows` queries q[r] of one KV head: they have served
  // fewer than `every` steps, and each row's query is within kHoldCos (cosine) of the direction of
  // the row's query that chose them (a token whose query turned elsewhere chooses again;
  // TokenSelect, Wu et al. 2024, reuses a choice between similar queries so).
  // Keeping a new choice. A held choice is attended with the pages written since it was made (the
  // page then last, and any after it): tokens evicted at decode steps are the newest. A head's
  // choice is read and written by its own work item only, and dropped (forget_choice) by the
  // calling thread before a call that is not a decode step; a copy, a move and clear() start
  // without one.
  static constexpr float kHoldCos = 0.8f;
  // The most query rows of a KV head that hold a choice: a decode step of a larger GQA group
  // attends in blocks of this many rows, each choosing for itself (attention_decode).
  static constexpr int kHoldRowsMost = 16;
  bool holds_choice(int every, const float* const* q, int rows) const;
  const std::vector<int>& held_choice() const;
  // `pages`: as select gives them, increasing and distinct (held_choice relies on it).
  void hold_choice(const std::vector<int>& pages, const float* const* q, int rows) const;
  void forget_choice() const { held_uses_ = 0; }

  // Exact attention of rows q[r] (positions qpos[r]; keys visible as key_visible says) over the
  // tokens of `pages`, before normalisation, as attend_rows (attention_rows.h) gives it:
  // m[r] = max x_j, l[r] = sum exp(x_j - m[r]), acc[r * d ..] = sum exp(x_j - m[r]) v_j, the
  // logits x_j soft-capped when softcap > 0; a row that sees nothing gets m = -inf, l = 0, acc = 0.
  // With `cover` (rows of them), also each row's RecallCover (of the logits before any cap, as
  // the Taylor state holds them), whose vs and xv point into `cover_buf` (2 * rows * d floats).
  void attend(const float* const* q, const int32_t* qpos, int rows, int window, float softcap, const std::vector<int>& pages,
              float* acc, float* m, float* l, RecallCover* cover = nullptr, float* cover_buf = nullptr) const;

  // Token j's stored key and value read back as floats, and its position (a prompt chunk's
  // recalled rows, gathered once per call: attention.cpp; tests, references).
  void load(int j, float* k, float* v) const;
  int32_t pos(int j) const { return pos_[static_cast<size_t>(j)]; }
  // Quest: page p's summary, per channel the minimum and maximum of its keys as stored.
  const float* page_min(int p) const { return summary_.data() + static_cast<size_t>(p) * 2 * d_; }
  const float* page_max(int p) const { return page_min(p) + d_; }
  // Shortlist: page p's summary as stored (q8_0), read back: 2 d floats, the minima then the maxima.
  void page_sketch(int p, float* minmax) const;

  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(d_, page_, type_, score_, row_, n_, k_, v_, pos_, summary_, sketch_, basis_, coords_);
    if constexpr (std::is_same_v<A, StateReader>) check_read();
  }
 private:
  int d_ = 0, page_ = 0;
  KvType type_ = KvType::Q8_0;
  RecallScore score_ = RecallScore::Keys;
  size_t row_ = 0;
  int n_ = 0;
  // Gives pages [p0, p1) of a mapped store back to the page cache: their values, and their keys
  // when queries read their summaries first (Quest, Shortlist). Called in batches (kReleaseEvery written pages, or
  // kReleaseEvery attention calls that read the store: count_read), not after every read or write.
  void release_pages(int p0, int p1) const;
  // Row n's key (as stored) into its page's summary.
  void summarise(size_t n);
  // Whether pages keep a summary (Quest, Shortlist, Lowrank): summarise runs at each add.
  bool summarised() const { return score_ != RecallScore::Keys; }
  // Whether a first pass over summaries chooses the pages whose keys are read (Shortlist, and
  // Lowrank once its basis is fitted), and whether queries read the keys of a few pages only.
  bool shortlists() const { return score_ == RecallScore::Shortlist || (score_ == RecallScore::Lowrank && basis_.fitted()); }
  bool reads_few_keys() const { return score_ == RecallScore::Quest || shortlists(); }
  void key_scores_q8_0(const float* const* q, int rows, const int* pages, int n, float* score) const;
  // Gives back every page of a mapped store, keys and values.
  void release_all() const;
  // After a state file was read: throws slake::Error when the fields disagree with each other.
  void check_read() const;
  StoreBytes k_, v_;               // [n][row_]
  std::vector<int32_t> pos_;       // [n]
  // The pages' summaries, per channel the minimum then the maximum of the page's keys as stored;
  // side by side, so that a page's bound is one dot product, [min(q, 0), max(q, 0)] . [min, max].
  // Quest: [pages][2 d] floats, an exact bound. Shortlist: [pages] q8_0 rows of 2 d values, a
  // quarter of the bytes every step reads, scored by integer dot products against the query
  // rounded to q8_0 as the keys are (the keys of the shortlist decide).
  std::vector<float> summary_;
  std::vector<uint8_t> sketch_;
  size_t sketch_row() const;
  // Lowrank: the basis, and per tile of 16 keys the keys' fp16 scales (32 bytes), then their
  // coordinates as int8 + 128, 4 per key at a time (quant_dot.h, max_dot_lanes16_u8).
  KeyBasis basis_;
  std::vector<uint8_t> coords_;
  int rank() const { return d_ / kLowrankDiv; }
  static size_t coord_tile_bytes(int head_dim) { return 32 + 16 * static_cast<size_t>(head_dim / kLowrankDiv); }
  size_t coord_tile() const { return coord_tile_bytes(d_); }
  // Where coordinate i of the key in `lane` lies in its tile.
  static size_t coord_at(size_t lane, int i) { return 32 + 64 * static_cast<size_t>(i / 4) + 4 * lane + static_cast<size_t>(i % 4); }
  // Key n's coordinates into its tile.
  void store_coords(size_t n, const float* k);
  void lowrank_scores(const float* const* q, int rows, int p0, int p1, float* score) const;
  void sketch_scores(const float* const* q, int rows, int p0, int p1, float* score) const;
  // A mapped store: attention calls that read it since its pages were last given back
  // (count_read), and the pages written and not given back yet.
  mutable std::atomic<int> reads_{0};
  int written_ = 0;
  // The pages decode chose last, the store's pages then, and the steps they have served (0: none
  // held); held_choice's answer.
  mutable std::vector<int> held_, held_view_;
  mutable std::vector<float> held_q_;  // the choosing rows' queries, unit length
  mutable int held_pages_ = 0, held_uses_ = 0;
};

// Merges the unnormalised softmax part (m2, l2, acc2) of one row into (m, l, acc) (d values).
void merge_softmax(float& m, float& l, float* acc, float m2, float l2, const float* acc2, int d);

}  // namespace slake
