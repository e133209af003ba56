#include "slake/kv/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "slake/kv/attention_rows.h"
#include "slake/error.h"
#include "slake/kv/kv_recall.h"
#include "slake/kv/kv_scores.h"
#include "slake/cpu/ops.h"
#include "slake/kv/ptaa.h"
#include "slake/model/softcap.h"

namespace slake {

namespace {
constexpr int kTile = 64;
constexpr int kSplitKeys = 1024;  // keys per work item when a call's rows fit one block

// How many parts attention_split_keys cuts the keys of `layer` into: about kSplitKeys keys each,
// from the longest head.
int key_splits(const KvCache& cache, int layer, int n_kv_heads) {
  int most = 0;
  for (int h = 0; h < n_kv_heads; ++h) most = std::max(most, cache.head(layer, h).n);
  return std::min(64, (most + kSplitKeys - 1) / kSplitKeys);
}

// Whether the head recalls from its store: the cache recalls and the store holds something.
bool recalls(const KvCache& cache, const KvHead& kv) { return cache.recall().on() && kv.recall.n() > 0; }

// Whether the head's Taylor state holds the evicted tokens and must then stand for the ones not
// recalled (algorithm.md §9.3), so that the recalled rows' cover is summed as they are attended.
bool covers_recalled(const KvHead& kv) { return kv.lin.n > 0.0f && kv.lin.centroids == 0; }

// Counts one read of each KV head's store of `layer` when an attention call ends, however many
// blocks of its rows recalled (RecallStore::count_read).
struct StoreReads {
  const KvCache& cache;
  int layer, n_kv_heads;
  ~StoreReads() {
    for (int kvh = 0; kvh < n_kv_heads; ++kvh)
      if (const KvHead& kv = cache.head(layer, kvh); recalls(cache, kv)) kv.recall.count_read();
  }
};

// Drops each KV head's held recall choice (RecallStore::forget_choice) in the calling thread, before
// a call's work items start: a call that is not a decode step of one block of rows per head.
void forget_choices(const KvCache& cache, int layer, int n_kv_heads) {
  if (!cache.recall().on() || cache.recall().every <= 1) return;
  for (int kvh = 0; kvh < n_kv_heads; ++kvh) cache.head(layer, kvh).recall.forget_choice();
}

// recall_scores' entry for a head whose decode step attends an earlier step's choice.
const float kHeldChoiceMark = 0.0f;
const float* const kHeldChoice = &kHeldChoiceMark;

// The recall part of a block of n rows of one KV head (algorithm.md §9.2): the cache's recall.pages
// pages of kv's store with the highest score for the rows, attended exactly into (acc, m, l) as
// attend_rows would. When the head's Taylor state holds the evicted tokens, it must then stand for
// the ones not recalled: cover[r] says what was (vs and xv in cover_buf, 2 n d floats). Returns
// whether cover was filled.
// `scores`: the pages' scores for these rows (page_scores over every page), or null to score them here;
// `chosen`, when given, the pages themselves (chosen for the rows of a prompt chunk's call: chunk_pages).
// `decode`: the rows are a decode step's, which attends the pages an earlier step chose while that
// choice holds (RecallConfig::every; then `scores` is null) and keeps the choice it makes. A call
// that is not such a step dropped every head's choice before its work items started (forget_choices).
bool recall_part(const KvCache& cache, const KvHead& kv, const float* const* q, const int32_t* qpos, int n, int window,
                 float softcap, float* acc, float* m, float* l, RecallCover* cover, float* cover_buf, const float* scores,
                 const std::vector<int>* chosen = nullptr, bool decode = false) {
  thread_local std::vector<int> pages;
  const RecallConfig& rc = cache.recall();
  // recall_scores decided a long store's hold already: scores it computed mean the choice did not
  // hold, kHeldChoice that it did; a short store's is decided here.
  if (decode && (scores == kHeldChoice || (!scores && kv.recall.holds_choice(rc.every, q, n)))) {
    chosen = &kv.recall.held_choice();
  } else if (!chosen) {
    if (scores) kv.recall.select_scored(q, scores, n, rc.pages, &pages);
    else kv.recall.select(q, n, rc.pages, &pages);
    if (decode && rc.every > 1) kv.recall.hold_choice(pages, q, n);
  }
  const bool covers = covers_recalled(kv);
  kv.recall.attend(q, qpos, n, window, softcap, chosen ? *chosen : pages, acc, m, l, covers ? cover : nullptr, cover_buf);
  return covers;
}

// recall_part merged into a block's exact part (acc, m, l) of n rows.
bool recall_merge(const KvCache& cache, const KvHead& kv, const float* const* q, const int32_t* qpos, int n, int window,
                  float softcap, float* acc, float* m, float* l, RecallCover* cover, std::vector<float>& cover_buf, const float* scores,
                  const std::vector<int>* chosen = nullptr, bool decode = false) {
  const int d = cache.head_dim();
  thread_local std::vector<float> r_acc;
  float r_m[kLanes], r_l[kLanes];
  r_acc.resize(static_cast<size_t>(n) * d);
  cover_buf.resize(static_cast<size_t>(2 * n) * d);
  const bool covers = recall_part(cache, kv, q, qpos, n, window, softcap, r_acc.data(), r_m, r_l, cover, cover_buf.data(), scores, chosen, decode);
  for (int r = 0; r < n; ++r)
    merge_softmax(m[r], l[r], acc + static_cast<size_t>(r) * d, r_m[r], r_l[r], r_acc.data() + static_cast<size_t>(r) * d, d);
  return covers;
}

// The page scores of every KV head's store for the rows of tokens [t0, n_tokens) (a decode token's
// GQA group, a block of rows, or the last tokens of a prompt chunk: chunk_pages), computed over
// runs of at least kScorePages pages in parallel: a long store scored inside its head's own work item
// would leave the other threads idle (3 KV heads on 2 threads, or 1 on 16). Returns, per KV head,
// its scores (RecallStore::page_scores over every page, row r of the range's token t0 + r / group)
// or null where its store is too short to be worth it, in the calling thread's buffers until its
// next call; null itself when no head's scores were computed and none holds a choice (a cache that
// does not recall: no work, no allocation). A decode step (`decode`) skips the long heads that
// attend an earlier step's choice (RecallStore::holds_choice), whose entry is kHeldChoice, which
// only recall_part reads. For a prompt chunk's rows the buffer holds every long head's scores at
// once (32 x group rows by n_pages floats a head: 512 KiB for a 16K-token store and a group of 4).
constexpr int kScorePages = 64, kScorePagesMost = 1024;
const float* const* recall_scores(const float* q, int t0, int n_tokens, const KvCache& cache, int layer,
                                  const AttentionShape& s, ThreadPool& pool, bool decode = false) {
  if (!cache.recall().on()) return nullptr;
  const int group = s.n_heads / s.n_kv_heads, d = s.head_dim, rows = (n_tokens - t0) * group;
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * d;
  thread_local std::vector<float> buf;
  thread_local std::vector<const float*> qr;  // [n_kv_heads][rows]
  qr.resize(static_cast<size_t>(s.n_kv_heads) * rows);
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh)
    for (int r = 0; r < rows; ++r)
      qr[static_cast<size_t>(kvh) * rows + r] = q + (t0 + r / group) * qdim + static_cast<int64_t>(kvh * group + r % group) * d;
  std::vector<size_t> off(static_cast<size_t>(s.n_kv_heads), 0);
  std::vector<std::pair<int, int>> items;  // (KV head, first page)
  thread_local std::vector<const float*> out;  // the result: kHeldChoice here, the scores below
  out.assign(static_cast<size_t>(s.n_kv_heads), nullptr);
  bool any_held = false;
  size_t total = 0;
  int all_pages = 0;
  std::vector<int> scored;  // the KV heads whose stores are scored here
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
    const RecallStore& st = cache.head(layer, kvh).recall;
    const int np = st.n_pages();
    if (np <= kScorePages || np <= cache.recall().pages) continue;  // scored in the head's own item, or all recalled
    if (decode && st.holds_choice(cache.recall().every, qr.data() + static_cast<size_t>(kvh) * rows, rows)) {
      out[static_cast<size_t>(kvh)] = kHeldChoice;
      any_held = true;
      continue;
    }
    off[static_cast<size_t>(kvh)] = total;
    total += static_cast<size_t>(rows) * np;
    scored.push_back(kvh);
    all_pages += np;
  }
  if (scored.empty() && !any_held) return nullptr;
  // Items of at least kScorePages pages, larger where the stores are long: about 8 a thread, each
  // a longer run of the store's memory for the first pass to stream, and at most kScorePagesMost
  // (288 KiB of low-rank coordinates), which stay in the core's cache while every 4 rows read
  // them again.
  const int per_item = std::clamp((all_pages / (8 * pool.size()) + 15) / 16 * 16, kScorePages, kScorePagesMost);
  for (const int kvh : scored)
    for (int p0 = 0; p0 < cache.head(layer, kvh).recall.n_pages(); p0 += per_item) items.emplace_back(kvh, p0);
  buf.resize(total);
  // The pool's threads read the calling thread's buffers through these.
  float* const base = buf.data();
  const float* const* const qrows = qr.data();
  pool.parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e, int) {
    for (int64_t w = b; w < e; ++w) {
      const auto [kvh, p0] = items[static_cast<size_t>(w)];
      const RecallStore& st = cache.head(layer, kvh).recall;
      st.page_scores(qrows + static_cast<size_t>(kvh) * rows, rows, p0, std::min(st.n_pages(), p0 + per_item),
                     base + off[static_cast<size_t>(kvh)]);
    }
  });
  for (const auto& [kvh, p0] : items)
    if (p0 == 0) out[static_cast<size_t>(kvh)] = base + off[static_cast<size_t>(kvh)];
  return out.data();
}

// Head kvh's entry of recall_scores' result (null: none; kHeldChoice in a decode step: a held choice).
const float* head_scores(const float* const* scores, int kvh) { return scores ? scores[kvh] : nullptr; }

// The pages each KV head's rows of a prompt chunk recall (algorithm.md §9.2, chunked prefill): a
// later chunk's store holds what the chunks before it evicted, and scoring it for every block of 16
// rows would cost what attending to it does. So the store is scored once per call for the rows of
// its last kChunkRecallTokens tokens (kv_recall.h), where a prompt's question stands; from those
// scores each of these tokens chooses its own pages by its own rows, as a decode step would (`own`),
// and all of them together choose the pages of the call's rows before them (`call`, when asked
// for). A long store is scored over its pages in parallel (recall_scores), a short one in its
// head's own work item. Empty for a head with no store.
struct ChunkPages {
  int t0 = 0;                                      // the first of the tokens that choose
  std::vector<std::vector<int>> call;              // [kvh]
  std::vector<std::vector<std::vector<int>>> own;  // [t - t0][kvh]
};
ChunkPages chunk_pages(const float* q, int n_tokens, const KvCache& cache, int layer, const AttentionShape& s, ThreadPool& pool,
                       bool call, bool own) {
  const int group = s.n_heads / s.n_kv_heads, d = s.head_dim, t0 = std::max(0, n_tokens - kChunkRecallTokens);
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * d;
  const int rows = (n_tokens - t0) * group, want = cache.recall().pages;
  const float* const* scores = recall_scores(q, t0, n_tokens, cache, layer, s, pool);
  ChunkPages pages;
  pages.t0 = t0;
  if (call) pages.call.resize(static_cast<size_t>(s.n_kv_heads));
  if (own) pages.own.assign(static_cast<size_t>(n_tokens - t0), std::vector<std::vector<int>>(static_cast<size_t>(s.n_kv_heads)));
  pool.parallel_for(s.n_kv_heads, 1, [&](int64_t b, int64_t e, int) {
    std::vector<const float*> qr;
    for (int64_t kvh = b; kvh < e; ++kvh) {
      const KvHead& kv = cache.head(layer, static_cast<int>(kvh));
      if (!recalls(cache, kv)) continue;
      qr.clear();
      for (int t = t0; t < n_tokens; ++t)
        for (int g = 0; g < group; ++g) qr.push_back(q + t * qdim + (kvh * group + g) * d);
      const float* sc = head_scores(scores, static_cast<int>(kvh));
      // Rows r0..r0+n-1 of the range choose (score row r at sc + r * n_pages).
      auto choose = [&](int r0, int n, std::vector<int>* chosen) {
        if (sc) kv.recall.select_scored(qr.data() + r0, sc + static_cast<size_t>(r0) * kv.recall.n_pages(), n, want, chosen);
        else kv.recall.select(qr.data() + r0, n, want, chosen);
      };
      if (call) choose(0, rows, &pages.call[static_cast<size_t>(kvh)]);
      if (own)
        for (int t = t0; t < n_tokens; ++t) choose((t - t0) * group, group, &pages.own[static_cast<size_t>(t - t0)][static_cast<size_t>(kvh)]);
    }
  });
  return pages;
}

// The rows of the pages chunk_pages chose for a call, read back once as f32 rows in position order
// (a KV head of their own, n = 0 for a head that recalls nothing), so that every block of the call
// attends them with the tiled kernel, after the exact cache's rows and in the same online softmax.
// Only where the head's Taylor state need not know what was recalled (covers_recalled false):
// the state's cover is summed row by row in RecallStore::attend. Heap for the call: P * page rows
// of 2 d floats a KV head (0.75 MiB for SmolLM2's 3 heads and 32 pages), not counted as KV bytes.
std::vector<KvHead> recalled_rows(const KvCache& cache, int layer, const std::vector<std::vector<int>>& chosen, int d,
                                  ThreadPool& pool) {
  std::vector<KvHead> rows(chosen.size());
  pool.parallel_for(static_cast<int64_t>(chosen.size()), 1, [&](int64_t b, int64_t e, int) {
    std::vector<std::pair<int32_t, int>> order;  // (position, store row)
    for (int64_t kvh = b; kvh < e; ++kvh) {
      const KvHead& kv = cache.head(layer, static_cast<int>(kvh));
      if (chosen[static_cast<size_t>(kvh)].empty() || covers_recalled(kv)) continue;
      const RecallStore& st = kv.recall;
      order.clear();
      for (const int p : chosen[static_cast<size_t>(kvh)])
        for (int j = p * st.page(); j < std::min(st.n(), (p + 1) * st.page()); ++j) order.emplace_back(st.pos(j), j);
      std::sort(order.begin(), order.end());
      KvHead& h = rows[static_cast<size_t>(kvh)];
      h.k_row = h.v_row = static_cast<size_t>(d) * sizeof(float);
      h.n = static_cast<int>(order.size());
      h.k.resize(static_cast<size_t>(h.n) * h.k_row);
      h.v.resize(static_cast<size_t>(h.n) * h.v_row);
      h.pos.resize(static_cast<size_t>(h.n));
      for (int i = 0; i < h.n; ++i) {
        st.load(order[static_cast<size_t>(i)].second, reinterpret_cast<float*>(h.k.data() + i * h.k_row),
                reinterpret_cast<float*>(h.v.data() + i * h.v_row));
        h.pos[static_cast<size_t>(i)] = order[static_cast<size_t>(i)].first;
      }
    }
  });
  return rows;
}

// One block of rows per KV head (a decode token, or a few) over a long cache: each head's visible
// keys are split into parts of about kSplitKeys, every part is its own work item, and the parts'
// (m, l, acc) are merged per row (flash-decoding). Without it a step has one item per KV head:
// SmolLM2's 3 heads on 2 threads leave one thread idle a third of the time. The split depends on
// the keys only, never on the thread count, so results do not change with -t.
// With `scores` (a decode step, attention_decode), each part takes its rows' scores from them and
// reads no key. `decode`: the rows are a decode step's (recall_part).
void attention_split_keys(float* out, const float* q, const int32_t* qpos, int n_tokens, const KvCache& cache, int layer,
                          const AttentionShape& s, int splits, ThreadPool& pool, const std::vector<DecodeRowScores>* scores,
                          const float* const* page_scores, bool decode) {
  const int group = s.n_heads / s.n_kv_heads, d = s.head_dim, rows = n_tokens * group;
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * d;
  // A cache that recalls gives each KV head one more part: the pages recalled from its store.
  const bool recall = cache.recall().on();
  const int stride = splits + (recall ? 1 : 0);
  const size_t parts = static_cast<size_t>(s.n_kv_heads) * stride;
  // The calling thread's buffers, reached from the workers through these pointers (a thread_local
  // named inside the lambda would be each worker's own). Every part's finish() writes the entries
  // of its rows, the only ones the merge reads.
  thread_local std::vector<float> part_m_buf, part_l_buf, part_acc_buf, cover_buf;
  thread_local std::vector<RecallCover> cover_rows;
  thread_local std::vector<char> covered;
  part_m_buf.resize(parts * kLanes);
  part_l_buf.resize(parts * kLanes);
  part_acc_buf.resize(parts * kLanes * d);
  if (recall) {
    cover_buf.resize(static_cast<size_t>(s.n_kv_heads) * 2 * kLanes * d);
    cover_rows.resize(static_cast<size_t>(s.n_kv_heads) * kLanes);
    covered.assign(static_cast<size_t>(s.n_kv_heads), 0);
  }
  float* const part_m = part_m_buf.data();
  float* const part_l = part_l_buf.data();
  float* const part_acc = part_acc_buf.data();
  RecallCover* const covers = cover_rows.data();
  char* const covered_by = covered.data();
  float* const cover_at = cover_buf.data();
  const auto row_offset = [&](int kvh, int r) { return (r / group) * qdim + static_cast<int64_t>(kvh * group + r % group) * d; };
  pool.parallel_for(static_cast<int64_t>(parts), 1, [&](int64_t b, int64_t e, int) {
    thread_local RowBlock block;
    const float* qr[kLanes];
    int32_t pr[kLanes];
    for (int64_t w = b; w < e; ++w) {
      const int kvh = static_cast<int>(w / stride), part = static_cast<int>(w % stride);
      const KvHead& kv = cache.head(layer, kvh);
      for (int r = 0; r < rows; ++r) {
        qr[r] = q + row_offset(kvh, r);
        pr[r] = qpos[r / group];
      }
      float* const acc = &part_acc[static_cast<size_t>(w) * kLanes * d];
      float* const m = &part_m[static_cast<size_t>(w) * kLanes];
      float* const l = &part_l[static_cast<size_t>(w) * kLanes];
      if (part == splits) {  // the recall part
        if (!recalls(cache, kv)) {
          std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
          continue;
        }
        covered_by[kvh] = recall_part(cache, kv, qr, pr, rows, s.sliding_window, s.softcap, acc, m, l, covers + static_cast<size_t>(kvh) * kLanes,
                                      cover_at + static_cast<size_t>(kvh) * 2 * kLanes * d, head_scores(page_scores, kvh), nullptr,
                                      decode);
        continue;
      }
      block.begin(qr, pr, rows, d, s.softcap);
      const auto [j_begin, j_end] = block.key_range(kv, s.sliding_window);
      const int per = (j_end - j_begin + splits - 1) / splits;
      const int lo = j_begin + part * per, hi = std::min(j_end, lo + per);
      if (lo < hi) {
        if (scores) block.attend_scored(kv, (*scores)[static_cast<size_t>(kvh)].x[0].data(), s.sliding_window, lo, hi);
        else block.attend(kv, s.sliding_window, lo, hi);
      }
      block.finish(acc, m, l);
    }
  });
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(d));
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh)
    for (int r = 0; r < rows; ++r) {
      const size_t w0 = static_cast<size_t>(kvh) * stride;
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      for (size_t w = w0; w < w0 + stride; ++w) m = std::max(m, part_m[w * kLanes + r]);
      std::fill(acc.begin(), acc.end(), 0.0f);
      if (m != -std::numeric_limits<float>::infinity())
        for (size_t w = w0; w < w0 + stride; ++w) {
          if (part_m[w * kLanes + r] == -std::numeric_limits<float>::infinity()) continue;  // a part that saw nothing
          const float c = std::exp(part_m[w * kLanes + r] - m);
          l += c * part_l[w * kLanes + r];
          axpy_f32(c, &part_acc[(w * kLanes + r) * d], acc.data(), d);
        }
      const int64_t off = row_offset(kvh, r);
      const RecallCover* cover = recall && covered_by[kvh] ? covers + static_cast<size_t>(kvh) * kLanes + r : nullptr;
      ptaa_finish(out + off, q + off, m, l, acc.data(), cache.head(layer, kvh).lin, d, s.softcap, cover);
    }
}
}  // namespace

void attention_one(float* out, const float* q, int32_t qpos, const KvHead& kv, int d, int window, float softcap) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  std::fill(out, out + d, 0.0f);
  float score[kTile];
  int idx[kTile];
  thread_local std::vector<float> ks, vs;
  ks.resize(static_cast<size_t>(d));
  vs.resize(static_cast<size_t>(d));
  for (int j0 = 0; j0 < kv.n; j0 += kTile) {
    const int j1 = std::min(kv.n, j0 + kTile);
    int cnt = 0;
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int j = j0; j < j1; ++j) {
      if (!key_visible(kv.pos[static_cast<size_t>(j)], qpos, window)) continue;
      const float x = soft_cap(dot_f32(q, kv.key(j, d, ks.data()), d) * scale, softcap);
      score[cnt] = x;
      idx[cnt++] = j;
      tile_max = std::max(tile_max, x);
    }
    if (cnt == 0) continue;
    const float m_new = std::max(m, tile_max);
    const float corr = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
    l *= corr;
    for (int i = 0; i < d; ++i) out[i] *= corr;
    for (int c = 0; c < cnt; ++c) {
      const float p = std::exp(score[c] - m_new);
      l += p;
      axpy_f32(p, kv.value(idx[c], d, vs.data()), out, d);
    }
    m = m_new;
  }
  if (l > 0.0f) {
    const float inv = 1.0f / l;
    for (int i = 0; i < d; ++i) out[i] *= inv;
  }
}

namespace {

// Rows g0..g0+n-1 (n <= kLanes) of KV head kvh's GQA group of one token (queries q_tok, n_heads *
// head_dim floats, at qpos), into out_tok: the exact cache, by the scores `x` of the rows
// (DecodeRowScores) or by reading its keys (x null), then the recall part where the head recalls
// (recall_merge's `scores`, `chosen` and `decode`), and the Taylor state's term.
void attend_group_block(float* out_tok, const float* q_tok, int32_t qpos, int kvh, int g0, int n, const KvCache& cache, int layer,
                        const AttentionShape& s, const lanes_f* x, const float* scores, const std::vector<int>* chosen, bool decode) {
  thread_local RowBlock block;
  thread_local std::vector<float> acc, cover_buf;
  RecallCover cover[kLanes];
  const int group = s.n_heads / s.n_kv_heads, d = s.head_dim;
  acc.resize(static_cast<size_t>(kLanes) * d);
  const float* qr[kLanes];
  int32_t pr[kLanes];
  float m[kLanes], l[kLanes];
  const KvHead& kv = cache.head(layer, kvh);
  for (int r = 0; r < n; ++r) {
    qr[r] = q_tok + static_cast<size_t>(kvh * group + g0 + r) * d;
    pr[r] = qpos;
  }
  block.begin(qr, pr, n, d, s.softcap);
  const auto [j_begin, j_end] = block.key_range(kv, s.sliding_window);
  if (x) block.attend_scored(kv, x, s.sliding_window, j_begin, j_end);
  else block.attend(kv, s.sliding_window, j_begin, j_end);
  block.finish(acc.data(), m, l);
  const bool covered = recalls(cache, kv) && recall_merge(cache, kv, qr, pr, n, s.sliding_window, s.softcap, acc.data(), m, l, cover,
                                                          cover_buf, scores, chosen, decode);
  for (int r = 0; r < n; ++r)
    ptaa_finish(out_tok + (qr[r] - q_tok), qr[r], m[r], l[r], acc.data() + static_cast<size_t>(r) * d, kv.lin, d, s.softcap,
                covered ? &cover[r] : nullptr);
}

// The rows of tokens pages.t0..n_tokens-1 of a prompt chunk's call: each token's rows of a KV head
// attend the exact cache and the pages that token chose (ChunkPages::own), in blocks of up to
// kLanes rows of one token, a work item each.
void attention_own_pages(float* out, const float* q, const int32_t* qpos, int n_tokens, const KvCache& cache, int layer,
                         const AttentionShape& s, ThreadPool& pool, const ChunkPages& pages) {
  const int group = s.n_heads / s.n_kv_heads, per_token = (group + kLanes - 1) / kLanes;
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * s.head_dim;
  const int64_t items = static_cast<int64_t>(n_tokens - pages.t0) * s.n_kv_heads * per_token;
  pool.parallel_for(items, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t w = b; w < e; ++w) {
      const int t = pages.t0 + static_cast<int>(w / (s.n_kv_heads * per_token));
      const int kvh = static_cast<int>(w / per_token % s.n_kv_heads), g0 = static_cast<int>(w % per_token) * kLanes;
      attend_group_block(out + t * qdim, q + t * qdim, qpos[t], kvh, g0, std::min(kLanes, group - g0), cache, layer, s, nullptr, nullptr,
                         &pages.own[static_cast<size_t>(t - pages.t0)][static_cast<size_t>(kvh)], false);
    }
  });
}

}  // namespace

void attention_prefill(float* out, const float* q, const int32_t* qpos, int n_tokens, const KvCache& cache, int layer,
                       const AttentionShape& s, ThreadPool& pool, bool decode_step) {
  const StoreReads reads{cache, layer, s.n_kv_heads};
  if (!decode_step) forget_choices(cache, layer, s.n_kv_heads);
  // Row r of KV head kvh is token r / group, query head kvh * group + r % group: a block of kLanes
  // rows holds whole GQA groups of neighbouring tokens. A work item is up to kBlocks blocks of one
  // KV head; they take the keys chunk by chunk, so a chunk is read from memory once per item and
  // then from the core's cache.
  constexpr int kBlocks = 8, kChunk = 256;
  const int group = s.n_heads / s.n_kv_heads, d = s.head_dim;
  const int64_t qdim = static_cast<int64_t>(s.n_heads) * d;
  // A prompt chunk's call after the first (more than one token, with a store): its last `tail`
  // tokens each attend the pages they choose by their own rows, after the rest; the rows before
  // them, and any call of more than one block of rows, recall the pages chosen for the whole call
  // (`chunk`: chunk_pages).
  bool stored = false;
  for (int kvh = 0; kvh < s.n_kv_heads && !stored; ++kvh) stored = recalls(cache, cache.head(layer, kvh));
  const int tail = !decode_step && n_tokens > 1 && stored ? std::min(n_tokens, kChunkRecallTokens) : 0;
  const bool chunk = tail > 0 || (static_cast<int64_t>(n_tokens) * group + kLanes - 1) / kLanes > 1;
  const int64_t rows = static_cast<int64_t>(n_tokens - tail) * group;
  const int64_t blocks = (rows + kLanes - 1) / kLanes;
  const int64_t items = (blocks + kBlocks - 1) / kBlocks;
  const float* const* page_scores = nullptr;
  if (!chunk) {
    page_scores = recall_scores(q, 0, n_tokens, cache, layer, s, pool, decode_step);
    const int splits = key_splits(cache, layer, s.n_kv_heads);
    if (splits > 1)
      return attention_split_keys(out, q, qpos, n_tokens, cache, layer, s, splits, pool, nullptr, page_scores, decode_step);
  }
  const ChunkPages pages_of = chunk && cache.recall().on() ? chunk_pages(q, n_tokens, cache, layer, s, pool, rows > 0, tail > 0)
                                                            : ChunkPages{};
  const std::vector<std::vector<int>>& chosen = pages_of.call;
  const std::vector<KvHead> recalled = chosen.empty() ? std::vector<KvHead>{} : recalled_rows(cache, layer, chosen, d, pool);
  pool.parallel_for(items * s.n_kv_heads, 1, [&](int64_t b, int64_t e, int) {
    thread_local std::vector<RowBlock> block(kBlocks);
    thread_local std::vector<float> acc, cover_buf;
    RecallCover cover[kLanes];
    acc.resize(static_cast<size_t>(kLanes) * d);
    const float* qr[kBlocks][kLanes];
    float* outr[kBlocks][kLanes];
    int32_t pr[kLanes];
    std::pair<int, int> range[kBlocks];
    float m[kLanes], l[kLanes];
    for (int64_t w = b; w < e; ++w) {
      const int kvh = static_cast<int>(w / items);
      const KvHead& kv = cache.head(layer, kvh);
      const int64_t b0 = (w % items) * kBlocks;
      const int nb = static_cast<int>(std::min<int64_t>(kBlocks, blocks - b0));
      int j_begin = kv.n, j_end = 0;
      for (int i = 0; i < nb; ++i) {
        const int64_t r0 = (b0 + i) * kLanes;
        const int n = static_cast<int>(std::min<int64_t>(kLanes, rows - r0));
        for (int r = 0; r < n; ++r) {
          const int64_t t = (r0 + r) / group;
          const int64_t off = t * qdim + static_cast<int64_t>(kvh * group + (r0 + r) % group) * d;
          qr[i][r] = q + off;
          outr[i][r] = out + off;
          pr[r] = qpos[t];
        }
        block[static_cast<size_t>(i)].begin(qr[i], pr, n, d, s.softcap);
        range[i] = block[static_cast<size_t>(i)].key_range(kv, s.sliding_window);
        j_begin = std::min(j_begin, range[i].first);
        j_end = std::max(j_end, range[i].second);
      }
      for (int c0 = j_begin; c0 < j_end; c0 += kChunk)
        for (int i = 0; i < nb; ++i) {
          const int lo = std::max(c0, range[i].first), hi = std::min(c0 + kChunk, range[i].second);
          if (lo < hi) block[static_cast<size_t>(i)].attend(kv, s.sliding_window, lo, hi);
        }
      const KvHead* gathered = recalled.empty() ? nullptr : &recalled[static_cast<size_t>(kvh)];
      if (gathered && gathered->n > 0)
        for (int i = 0; i < nb; ++i) {
          const auto [lo, hi] = block[static_cast<size_t>(i)].key_range(*gathered, s.sliding_window);
          if (lo < hi) block[static_cast<size_t>(i)].attend(*gathered, s.sliding_window, lo, hi);
        }
      for (int i = 0; i < nb; ++i) {
        const int n = static_cast<int>(std::min<int64_t>(kLanes, rows - (b0 + i) * kLanes));
        block[static_cast<size_t>(i)].finish(acc.data(), m, l);
        bool covered = false;
        // One block (a decode step) chooses its own pages; the blocks of a prompt chunk after the
        // first recall the pages chosen for this call's rows (chunk_pages), attended above unless
        // the Taylor state must know what they were.
        const std::vector<int>* pages = chosen.empty() ? nullptr : &chosen[static_cast<size_t>(kvh)];
        if (!chunk ? recalls(cache, kv) : pages && !pages->empty() && covers_recalled(kv)) {
          for (int r = 0; r < n; ++r) pr[r] = qpos[((b0 + i) * kLanes + r) / group];
          covered = recall_merge(cache, kv, qr[i], pr, n, s.sliding_window, s.softcap, acc.data(), m, l, cover, cover_buf,
                                 head_scores(page_scores, kvh), !chunk ? nullptr : pages, !chunk && decode_step);
        }
        for (int r = 0; r < n; ++r)
          ptaa_finish(outr[i][r], qr[i][r], m[r], l[r], acc.data() + static_cast<size_t>(r) * d, kv.lin, d, s.softcap,
                      covered ? &cover[r] : nullptr);
      }
    }
  });
  if (tail > 0) attention_own_pages(out, q, qpos, n_tokens, cache, layer, s, pool, pages_of);
}

void attention_decode(float* out, const float* q, int32_t qpos, const KvCache& cache, int layer, const AttentionShape& s,
                      const std::vector<DecodeRowScores>& scores, ThreadPool& pool) {
  const int group = s.n_heads / s.n_kv_heads;
  const int blocks = (group + kLanes - 1) / kLanes;
  if (static_cast<int>(scores.size()) != s.n_kv_heads) fail("internal: decode scores for " + std::to_string(scores.size()) + " KV heads");
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
    const DecodeRowScores& xs = scores[static_cast<size_t>(kvh)];
    if (xs.n != cache.head(layer, kvh).n || xs.group != group) fail("internal: decode scores are out of step with the cache");
  }
  const StoreReads reads{cache, layer, s.n_kv_heads};
  static_assert(RecallStore::kHoldRowsMost == kLanes, "a decode step's block of rows is what holds a choice");
  if (blocks > 1) forget_choices(cache, layer, s.n_kv_heads);  // each block of a large group chooses for itself
  // A long cache is split over its keys as attention_prefill splits it, so that 3 KV heads keep 2
  // threads busy and both paths sum in the same order.
  const float* const* page_scores = nullptr;
  if (blocks == 1) {
    page_scores = recall_scores(q, 0, 1, cache, layer, s, pool, true);
    const int splits = key_splits(cache, layer, s.n_kv_heads);
    if (splits > 1) return attention_split_keys(out, q, &qpos, 1, cache, layer, s, splits, pool, &scores, page_scores, true);
  }
  pool.parallel_for(static_cast<int64_t>(s.n_kv_heads) * blocks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t w = b; w < e; ++w) {
      const int kvh = static_cast<int>(w / blocks), g0 = static_cast<int>(w % blocks) * kLanes;
      // Rows of more than one block (a GQA group over kLanes) each choose for themselves.
      attend_group_block(out, q, qpos, kvh, g0, std::min(kLanes, group - g0), cache, layer, s,
                         scores[static_cast<size_t>(kvh)].x[static_cast<size_t>(g0 / kLanes)].data(), head_scores(page_scores, kvh),
                         nullptr, blocks == 1);
    }
  });
}

}  // namespace slake
