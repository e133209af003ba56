#include "slake/kv/kv_recall.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "slake/cpu/ops.h"
#include "slake/cpu/prefetch.h"
#include "slake/error.h"
#include "slake/kv/attention.h"
#include "slake/kv/attention_rows.h"
#include "slake/model/softcap.h"
#include "slake/quant/quant_dot.h"

namespace slake {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// key_scores_q8_0 fetches the keys of the page this many on (into L1): +4-15% decode at 16K on
// SmolLM2 over none in four interleaved pairs; 1 and 4 ahead measured no better.
constexpr int kPrefetchPages = 2;
}  // namespace

const std::vector<std::string>& recall_score_names() {
  static const std::vector<std::string> names{"keys", "quest", "shortlist", "lowrank"};
  return names;
}

RecallScore parse_recall_score(const std::string& name) {
  if (name == "keys") return RecallScore::Keys;
  if (name == "quest") return RecallScore::Quest;
  if (name == "shortlist") return RecallScore::Shortlist;
  if (name == "lowrank") return RecallScore::Lowrank;
  fail("unknown recall score '" + name + "' (keys, quest, shortlist, lowrank)");
}

const char* recall_score_name(RecallScore s) {
  return s == RecallScore::Quest ? "quest" : s == RecallScore::Shortlist ? "shortlist" : s == RecallScore::Lowrank ? "lowrank" : "keys";
}

RecallStore::RecallStore(int head_dim, int page, KvType type, RecallScore score, std::shared_ptr<const std::string> file_dir)
    : d_(head_dim), page_(page), type_(type), score_(score), k_(StoreAllocator<uint8_t>(file_dir)), v_(StoreAllocator<uint8_t>(file_dir)) {
  if (page < 1) fail("recall page size must be positive, got " + std::to_string(page));
  if (kv_is_kivi(type)) fail(std::string("the recall store keeps rows; ") + kv_type_name(type) + " is not a row type");
  check_kv_type(type, head_dim, "--kv-store-type");
  row_ = kv_row_bytes(type, head_dim);
  if (score == RecallScore::Shortlist && head_dim % 16 != 0)
    fail("--kv-recall-score shortlist keeps page summaries in q8_0 blocks of 32: needs a head size that is a multiple of 16, got " +
         std::to_string(head_dim));
  if (score == RecallScore::Lowrank && (head_dim % 16 != 0 || page % 16 != 0))
    fail("--kv-recall-score lowrank scores keys 16 at a time in groups of 4 coordinates: needs a head size and a page size (--kv-recall-page) "
         "that are multiples of 16, got " + std::to_string(head_dim) + " and " + std::to_string(page));
}

size_t RecallStore::sketch_row() const { return kv_row_bytes(KvType::Q8_0, 2 * d_); }

RecallStore::RecallStore(const RecallStore& o)
    : d_(o.d_), page_(o.page_), type_(o.type_), score_(o.score_), row_(o.row_), n_(o.n_), k_(o.k_), v_(o.v_), pos_(o.pos_),
      summary_(o.summary_), sketch_(o.sketch_), basis_(o.basis_), coords_(o.coords_) {
  release_all();
  o.release_all();  // read whole to copy it
}

RecallStore& RecallStore::operator=(const RecallStore& o) {
  if (this == &o) return *this;
  d_ = o.d_, page_ = o.page_, type_ = o.type_, score_ = o.score_, row_ = o.row_, n_ = o.n_;
  k_ = o.k_, v_ = o.v_, pos_ = o.pos_, summary_ = o.summary_, sketch_ = o.sketch_, basis_ = o.basis_, coords_ = o.coords_;
  reads_ = 0, written_ = 0, held_uses_ = 0;
  release_all();
  o.release_all();
  return *this;
}

RecallStore::RecallStore(RecallStore&& o) noexcept
    : d_(o.d_), page_(o.page_), type_(o.type_), score_(o.score_), row_(o.row_), n_(o.n_), k_(std::move(o.k_)),
      v_(std::move(o.v_)), pos_(std::move(o.pos_)), summary_(std::move(o.summary_)),
      sketch_(std::move(o.sketch_)), basis_(std::move(o.basis_)), coords_(std::move(o.coords_)), reads_(o.reads_.load()),
      written_(o.written_) {
  o.held_uses_ = 0;  // a moved store holds no choice, nor does its target
}

RecallStore& RecallStore::operator=(RecallStore&& o) noexcept {
  d_ = o.d_, page_ = o.page_, type_ = o.type_, score_ = o.score_, row_ = o.row_, n_ = o.n_;
  k_ = std::move(o.k_), v_ = std::move(o.v_), pos_ = std::move(o.pos_), summary_ = std::move(o.summary_);
  sketch_ = std::move(o.sketch_), basis_ = std::move(o.basis_), coords_ = std::move(o.coords_);
  reads_ = o.reads_.load(), written_ = o.written_;
  held_uses_ = 0, o.held_uses_ = 0;
  return *this;
}

void RecallStore::check_read() const {
  if (page_ == 0 && n_ == 0 && k_.empty() && v_.empty() && pos_.empty() && summary_.empty() && sketch_.empty() && !basis_.fitted() &&
      coords_.empty())
    return;  // no store
  const size_t n = static_cast<size_t>(n_);
  const bool lowrank = score_ == RecallScore::Lowrank;
  // Lowrank: the basis fitted once the store reached kFitKeysPerDim * d keys, of d / kLowrankDiv
  // coordinates, and every key's coordinates in tiles of 16.
  const bool fit_ok = !lowrank ? !basis_.fitted() && coords_.empty()
                      : d_ % 16 == 0 && page_ % 16 == 0 && basis_.consistent() &&
                            basis_.fitted() == (n_ >= kFitKeysPerDim * d_) &&
                            (!basis_.fitted() || (basis_.d == d_ && basis_.r == rank())) &&
                            coords_.size() == (basis_.fitted() ? (n + 15) / 16 * coord_tile() : 0);
  const bool known = score_ == RecallScore::Keys || score_ == RecallScore::Quest || (score_ == RecallScore::Shortlist && d_ % 16 == 0) ||
                     lowrank;
  const bool ok = known && d_ > 0 && page_ > 0 && n_ >= 0 && !kv_is_kivi(type_) && row_ == kv_row_bytes(type_, d_) &&
                  k_.size() == n * row_ && v_.size() == n * row_ && pos_.size() == n &&
                  summary_.size() == (score_ == RecallScore::Quest ? static_cast<size_t>(n_pages()) * 2 * d_ : 0) &&
                  sketch_.size() == (score_ == RecallScore::Shortlist ? static_cast<size_t>(n_pages()) * sketch_row() : 0) && fit_ok;
  if (!ok) fail("state file: a recall store whose sizes disagree with each other");
}

void RecallStore::release_all() const {
  release_store_pages(k_, 0, k_.size());
  release_store_pages(v_, 0, v_.size());
}

void RecallStore::keep_rows_in(std::shared_ptr<const std::string> dir) {
  StoreAllocator<uint8_t> alloc(std::move(dir));
  if (alloc == k_.get_allocator()) return;
  StoreBytes k(k_.begin(), k_.end(), alloc), v(v_.begin(), v_.end(), alloc);
  k_.swap(k);
  v_.swap(v);
  release_all();
}

void RecallStore::release_pages(int p0, int p1) const {
  if (!file_backed() || p1 <= p0) return;
  const size_t at = static_cast<size_t>(p0) * static_cast<size_t>(page_) * row_;
  const size_t bytes = std::min(static_cast<size_t>(p1) * static_cast<size_t>(page_) * row_, v_.size()) - at;
  release_store_pages(v_, at, bytes);
  if (reads_few_keys()) release_store_pages(k_, at, bytes);
}

void RecallStore::add(const float* k, const float* v, int32_t pos) {
  const size_t n = static_cast<size_t>(n_);
  const uint8_t* was = v_.data();
  k_.resize((n + 1) * row_);
  v_.resize((n + 1) * row_);
  kv_store_row(type_, k, k_.data() + n * row_, d_);
  kv_store_row(type_, v, v_.data() + n * row_, d_);
  pos_.push_back(pos);
  ++n_;
  if (summarised()) summarise(n);
  // A mapped store: a grown mapping was filled by the copy; the pages written go back in batches.
  if (!file_backed()) return;
  if (v_.data() != was) {
    release_pages(0, n_pages());
    written_ = 0;
  } else if (n_ % page_ == 0 && ++written_ >= kReleaseEvery) {
    release_pages(n_pages() - written_, n_pages());
    written_ = 0;
  }
}

void RecallStore::summarise(size_t n) {
  // The summary bounds the keys as they are read back, so that the bound holds for what is attended.
  const int p = static_cast<int>(n / static_cast<size_t>(page_));
  thread_local std::vector<float> back;
  if (score_ == RecallScore::Lowrank) {
    if (basis_.fitted()) {
      back.resize(static_cast<size_t>(d_));
      kv_load_rows(type_, k_.data() + n * row_, back.data(), 1, d_);
      return store_coords(n, back.data());
    }
    if (n_ < kFitKeysPerDim * d_) return;  // ranked by the keys until then
    // The store's keys as they are read back fit the basis; each gets its coordinates.
    back.resize(static_cast<size_t>(n_) * d_);
    kv_load_rows(type_, k_.data(), back.data(), n_, d_);
    basis_ = fit_key_basis(back.data(), n_, d_, rank());
    for (size_t j = 0; j < static_cast<size_t>(n_); ++j) store_coords(j, back.data() + j * static_cast<size_t>(d_));
    return;
  }
  if (score_ == RecallScore::Shortlist) {
    // The page's range from its keys so far, rounded to q8_0 again as the page fills.
    const size_t j0 = static_cast<size_t>(p) * static_cast<size_t>(page_);
    const int cnt = static_cast<int>(n + 1 - j0);
    back.resize(static_cast<size_t>(cnt + 2) * d_);
    float* mm = back.data() + static_cast<size_t>(cnt) * d_;
    kv_load_rows(type_, k_.data() + j0 * row_, back.data(), cnt, d_);
    for (int i = 0; i < d_; ++i) {
      float lo = back[static_cast<size_t>(i)], hi = lo;
      for (int j = 1; j < cnt; ++j) {
        lo = std::min(lo, back[static_cast<size_t>(j) * d_ + i]);
        hi = std::max(hi, back[static_cast<size_t>(j) * d_ + i]);
      }
      mm[i] = lo;
      mm[d_ + i] = hi;
    }
    sketch_.resize(static_cast<size_t>(p + 1) * sketch_row());
    kv_store_row(KvType::Q8_0, mm, sketch_.data() + static_cast<size_t>(p) * sketch_row(), 2 * d_);
    return;
  }
  back.resize(static_cast<size_t>(d_));
  kv_load_rows(type_, k_.data() + n * row_, back.data(), 1, d_);
  if (n % static_cast<size_t>(page_) == 0) {
    summary_.insert(summary_.end(), back.begin(), back.end());
    summary_.insert(summary_.end(), back.begin(), back.end());
  } else {
    float* mn = summary_.data() + static_cast<size_t>(p) * 2 * d_;
    float* mx = mn + d_;
    for (int i = 0; i < d_; ++i) {
      mn[i] = std::min(mn[i], back[static_cast<size_t>(i)]);
      mx[i] = std::max(mx[i], back[static_cast<size_t>(i)]);
    }
  }
}

namespace {
// Lowrank's int8 rounding of a key's or a query's coordinates: scale the largest magnitude / 127,
// each value x to round(x / scale) in -127..127 (inv = 1 / scale, 0 for a zero vector). A NaN
// coordinate (a broken model's key) is left out of the scale and rounds to 0.
float largest_magnitude(const float* c, int r) {
  float amax = 0.0f;
  for (int i = 0; i < r; ++i) amax = std::max(amax, std::fabs(c[i]));
  return amax;
}
constexpr float kFp16Max = 65504.0f;
int round_int8(float x, float inv) {
  const float v = std::nearbyint(x * inv);
  return std::isnan(v) ? 0 : static_cast<int>(std::clamp(v, -127.0f, 127.0f));
}
}  // namespace

void RecallStore::store_coords(size_t n, const float* k) {
  const size_t tile = coord_tile(), t = n / 16, lane = n % 16;
  if (coords_.size() < (t + 1) * tile) coords_.resize((t + 1) * tile, 0);
  uint8_t* at = coords_.data() + t * tile;
  const int r = rank();
  thread_local std::vector<float> c;
  c.resize(static_cast<size_t>(r));
  basis_.key_coords(k, c.data());
  // The scale is capped at fp16's largest finite value: a key past 127 x 65504 along a direction
  // (a broken model's) keeps coordinates clamped to +-127 rather than an infinite scale, whose
  // products with its zero coordinates would be NaN scores.
  const uint16_t h = fp32_to_fp16(std::min(largest_magnitude(c.data(), r) / 127.0f, kFp16Max));
  std::memcpy(at + 2 * lane, &h, 2);
  const float s = fp16_to_fp32(h), inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int i = 0; i < r; ++i) at[coord_at(lane, i)] = static_cast<uint8_t>(round_int8(c[static_cast<size_t>(i)], inv) + 128);
}

void RecallStore::key_coords(int j, float* c) const {
  if (!basis_.fitted() || j < 0 || j >= n_) fail("internal: no low-rank coordinates of key " + std::to_string(j));
  const uint8_t* at = coords_.data() + static_cast<size_t>(j / 16) * coord_tile();
  const int lane = j % 16;
  uint16_t h;
  std::memcpy(&h, at + 2 * lane, 2);
  const float s = fp16_to_fp32(h);
  for (int i = 0; i < rank(); ++i) c[i] = s * static_cast<float>(static_cast<int>(at[coord_at(static_cast<size_t>(lane), i)]) - 128);
}

void RecallStore::page_sketch(int p, float* minmax) const {
  if (score_ != RecallScore::Shortlist || p < 0 || p >= n_pages()) fail("internal: no q8_0 summary of page " + std::to_string(p));
  kv_load_rows(KvType::Q8_0, sketch_.data() + static_cast<size_t>(p) * sketch_row(), minmax, 1, 2 * d_);
}

void RecallStore::clear() {
  written_ = 0;
  k_.clear();
  v_.clear();
  pos_.clear();
  summary_.clear();
  sketch_.clear();
  basis_ = KeyBasis();
  coords_.clear();
  held_uses_ = 0;
  n_ = 0;
}

size_t RecallStore::planned_bytes(int head_dim, int page, KvType type, int64_t tokens, RecallScore score) {
  if (page < 1 || tokens <= 0) return 0;
  const size_t pages = static_cast<size_t>((tokens + page - 1) / page);
  const size_t summary = score == RecallScore::Quest       ? 2 * static_cast<size_t>(head_dim) * sizeof(float)
                         : score == RecallScore::Shortlist ? kv_row_bytes(KvType::Q8_0, 2 * head_dim)
                                                           : 0;
  size_t lowrank = 0;  // once fitted: the basis, and the coordinates in tiles of 16 keys
  if (score == RecallScore::Lowrank && tokens >= static_cast<int64_t>(kFitKeysPerDim) * head_dim) {
    const size_t d = static_cast<size_t>(head_dim), r = d / kLowrankDiv;
    lowrank = (d + 2 * r * d) * sizeof(float) + static_cast<size_t>((tokens + 15) / 16) * coord_tile_bytes(head_dim);
  }
  return static_cast<size_t>(tokens) * (2 * kv_row_bytes(type, head_dim) + sizeof(int32_t)) + pages * summary + lowrank;
}

size_t RecallStore::bytes() const { return active() ? planned_bytes(d_, page_, type_, n_, score_) : 0; }

void RecallStore::page_bounds(const float* q, float* bound) const {
  if (score_ != RecallScore::Quest) fail("internal: page bounds of a store without Quest's summaries");
  page_scores(&q, 1, 0, n_pages(), bound);
}

void RecallStore::page_scores(const float* const* q, int rows, int p0, int p1, float* score) const {
  const size_t np = static_cast<size_t>(n_pages());
  if (score_ == RecallScore::Keys || (score_ == RecallScore::Lowrank && !basis_.fitted())) {
    thread_local std::vector<int> range;
    range.resize(static_cast<size_t>(std::max(0, p1 - p0)));
    std::iota(range.begin(), range.end(), p0);
    return key_scores(q, rows, range.data(), static_cast<int>(range.size()), score);
  }
  if (score_ == RecallScore::Shortlist) return sketch_scores(q, rows, p0, p1, score);
  if (score_ == RecallScore::Lowrank) return lowrank_scores(q, rows, p0, p1, score);
  // max(q_i min_i, q_i max_i) is q_i min_i where q_i < 0 and q_i max_i elsewhere: the bound is
  // one dot product of [min(q, 0), max(q, 0)] with the page's [min, max].
  const int w = 2 * d_;
  thread_local std::vector<float> split;
  split.resize(static_cast<size_t>(rows) * w);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < d_; ++i) {
      split[static_cast<size_t>(r) * w + i] = std::min(q[r][i], 0.0f);
      split[static_cast<size_t>(r) * w + d_ + i] = std::max(q[r][i], 0.0f);
    }
  // Tiles of 16 pages by the attention kernel's tile scorer (lanes over pages, no horizontal sum
  // per page), each tile's summaries read once for all rows; the last pages one at a time.
  int p = p0;
  if (w % 16 == 0)
    for (; p + kLanes <= p1; p += kLanes)
      for (int r = 0; r < rows; ++r) {
        const lanes_f b = score_tile_of_keys(split.data() + static_cast<size_t>(r) * w, page_min(p), w);
        for (int j = 0; j < kLanes; ++j) score[static_cast<size_t>(r) * np + p + j] = b[j];
      }
  for (; p < p1; ++p)
    for (int r = 0; r < rows; ++r) score[static_cast<size_t>(r) * np + p] = dot_f32(split.data() + static_cast<size_t>(r) * w, page_min(p), w);
}

void RecallStore::sketch_scores(const float* const* q, int rows, int p0, int p1, float* score) const {
  // [min(q, 0), max(q, 0)] rounded to q8_0 blocks against the pages' q8_0 summaries: integer dot
  // products (quant_dot.h, dot_rows16_q8_0), 16 pages by up to kTileTokens query rows a call.
  const size_t np = static_cast<size_t>(n_pages()), srow = sketch_row();
  const int w = 2 * d_;
  const size_t act = act_row_bytes(ActFormat::Q8_0, w);
  thread_local std::vector<float> split;
  thread_local std::vector<uint8_t> qa;
  split.resize(static_cast<size_t>(w));
  qa.resize(act * static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < d_; ++i) {
      split[static_cast<size_t>(i)] = std::min(q[r][i], 0.0f);
      split[static_cast<size_t>(d_ + i)] = std::max(q[r][i], 0.0f);
    }
    quantize_act_row(ActFormat::Q8_0, split.data(), qa.data() + act * static_cast<size_t>(r), w);
  }
  float out[kTileTokens * kRows16];
  for (int p = p0; p < p1; p += kRows16) {
    const int pm = std::min(kRows16, p1 - p);
    for (int r0 = 0; r0 < rows; r0 += kTileTokens) {
      const int rn = std::min(kTileTokens, rows - r0);
      dot_rows16_q8_0(w, sketch_.data() + static_cast<size_t>(p) * srow, srow, pm, qa.data() + act * static_cast<size_t>(r0), act, rn,
                      out, kRows16);
      for (int j = 0; j < rn; ++j)
        for (int i = 0; i < pm; ++i) score[static_cast<size_t>(r0 + j) * np + p + i] = out[j * kRows16 + i];
    }
  }
}

void RecallStore::lowrank_scores(const float* const* q, int rows, int p0, int p1, float* score) const {
  // Each query's coordinates rounded to int8 once; then the keys' coordinates 16 at a time
  // (quant_dot.h, max_dot_lanes16_u8), a page (a whole number of tiles) taking its tiles' largest.
  const size_t np = static_cast<size_t>(n_pages()), tile = coord_tile();
  const int r = rank();
  thread_local std::vector<float> qc, qscale;
  thread_local std::vector<int8_t> qi;
  thread_local std::vector<int32_t> qsum;
  qc.resize(static_cast<size_t>(r));
  qscale.resize(static_cast<size_t>(rows));
  qsum.assign(static_cast<size_t>(rows), 0);
  qi.resize(static_cast<size_t>(rows) * r);
  for (int row = 0; row < rows; ++row) {
    basis_.query_coords(q[row], qc.data());
    const float s = largest_magnitude(qc.data(), r) / 127.0f, inv = s > 0.0f ? 1.0f / s : 0.0f;
    qscale[static_cast<size_t>(row)] = s;
    for (int i = 0; i < r; ++i) {
      qi[static_cast<size_t>(row) * r + i] = static_cast<int8_t>(round_int8(qc[static_cast<size_t>(i)], inv));
      qsum[static_cast<size_t>(row)] += qi[static_cast<size_t>(row) * r + i];
    }
  }
  // Pages [p0, p1) are tiles [p0 m, ...) of 16 keys, m = page / 16: one call per up to 4 rows; with
  // pages of 16 the tiles' largest scores are the pages' and land in `score` directly.
  const int m = page_ / 16, j0 = p0 * page_, j1 = std::min(n_, p1 * page_);
  if (j1 <= j0) return;
  const int n_tiles = (j1 - j0 + 15) / 16, valid_last = j1 - j0 - 16 * (n_tiles - 1);
  thread_local std::vector<float> tile_top;
  if (m > 1) tile_top.resize(static_cast<size_t>(kTileTokens) * n_tiles);
  for (int r0 = 0; r0 < rows; r0 += kTileTokens) {
    const int rn = std::min(kTileTokens, rows - r0);
    float* out = m == 1 ? score + static_cast<size_t>(r0) * np + p0 : tile_top.data();
    const size_t out_stride = m == 1 ? np : static_cast<size_t>(n_tiles);
    max_dot_lanes16_u8(r, coords_.data() + static_cast<size_t>(j0 / 16) * tile, tile, n_tiles, valid_last,
                       qi.data() + static_cast<size_t>(r0) * r, static_cast<size_t>(r), qscale.data() + r0, qsum.data() + r0, rn, out,
                       out_stride);
    if (m == 1) continue;
    for (int k = 0; k < rn; ++k)
      for (int p = p0; p < p1 && (p - p0) * m < n_tiles; ++p) {
        const float* tt = tile_top.data() + static_cast<size_t>(k) * n_tiles + static_cast<size_t>((p - p0) * m);
        score[static_cast<size_t>(r0 + k) * np + p] = *std::max_element(tt, tt + std::min(m, n_tiles - (p - p0) * m));
      }
  }
}

void RecallStore::key_scores(const float* const* q, int rows, const int* pages, int n, float* score) const {
  if (type_ == KvType::Q8_0) return key_scores_q8_0(q, rows, pages, n, score);
  const size_t np = static_cast<size_t>(n_pages());
  // The page's keys as floats, a tile of 16 at a time scored by the attention kernel's tile scorer
  // (lanes over keys, no horizontal sum per key); the lanes of rows past the page's end are not read.
  const bool tiles = d_ % 16 == 0;
  const int padded = (page_ + kLanes - 1) / kLanes * kLanes;
  thread_local std::vector<float> ks;
  ks.resize(static_cast<size_t>(padded) * d_);
  for (int i = 0; i < n; ++i) {
    const int p = pages[i], j0 = p * page_, cnt = page_tokens(p);
    kv_load_rows(type_, k_.data() + static_cast<size_t>(j0) * row_, ks.data(), cnt, d_);
    for (int r = 0; r < rows; ++r) {
      float top = kNegInf;
      if (tiles) {
        for (int t0 = 0; t0 < cnt; t0 += kLanes) {
          const lanes_f s = score_tile_of_keys(q[r], ks.data() + static_cast<size_t>(t0) * d_, d_);
          for (int j = 0; j < std::min(kLanes, cnt - t0); ++j) top = std::max(top, s[j]);
        }
      } else {
        for (int j = 0; j < cnt; ++j) top = std::max(top, dot_f32(q[r], ks.data() + static_cast<size_t>(j) * d_, d_));
      }
      score[static_cast<size_t>(r) * np + p] = top;
    }
  }
}

void RecallStore::key_scores_q8_0(const float* const* q, int rows, const int* pages, int n, float* score) const {
  // q8_0 keys against the query rounded to q8_0 blocks once (as ggml's CPU attention does with a
  // q8_0 cache): integer dot products over the stored blocks, no key dequantised
  // (quant_dot.h, dot_rows16_q8_0), up to 16 keys by up to kTileTokens query rows a call.
  const size_t np = static_cast<size_t>(n_pages());
  const size_t act = act_row_bytes(ActFormat::Q8_0, d_);
  thread_local std::vector<uint8_t> qa;
  qa.resize(act * static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) quantize_act_row(ActFormat::Q8_0, q[r], qa.data() + act * static_cast<size_t>(r), d_);
  float out[kTileTokens * kRows16];
  const size_t page_bytes = static_cast<size_t>(page_) * row_;
  for (int i = 0; i < n; ++i) {
    const int p = pages[i], j0 = p * page_, cnt = page_tokens(p);
    // The keys of the page kPrefetchPages on (a page's first touch is its 16 keys' scales at once).
    if (i + kPrefetchPages < n && pages[i + kPrefetchPages] * page_ < n_) {
      const uint8_t* next = k_.data() + static_cast<size_t>(pages[i + kPrefetchPages]) * page_bytes;
      prefetch_bytes(next, std::min(page_bytes, k_.size() - static_cast<size_t>(pages[i + kPrefetchPages]) * page_bytes));
    }
    for (int r0 = 0; r0 < rows; r0 += kTileTokens) {
      const int rn = std::min(kTileTokens, rows - r0);
      float top[kTileTokens];
      std::fill(top, top + kTileTokens, kNegInf);
      for (int t = 0; t < cnt; t += kRows16) {
        const int rm = std::min(kRows16, cnt - t);
        dot_rows16_q8_0(d_, k_.data() + static_cast<size_t>(j0 + t) * row_, row_, rm, qa.data() + act * static_cast<size_t>(r0), act, rn,
                        out, kRows16);
        for (int j = 0; j < rn; ++j)
          for (int k = 0; k < rm; ++k) top[j] = std::max(top[j], out[j * kRows16 + k]);
      }
      for (int j = 0; j < rn; ++j) score[static_cast<size_t>(r0 + j) * np + p] = top[j];
    }
  }
}

namespace {
// The `want` of the n pages `among` whose score (score[r * np + p]), relative to each row's best
// of them, is highest for some row, into `out` (ties to the later page), in increasing order: a page
// ranks by the row that wants it most, so that a page one query head needs is not outvoted by the
// others. Scores are in each row's own softmax units.
void rank_pages(const float* score, int np, int rows, const int* among, int n, int want, std::vector<int>* out) {
  thread_local std::vector<float> best, sorted;
  best.assign(static_cast<size_t>(np), kNegInf);
  const bool all = n == np;  // among is every page, in order: direct loops
  for (int r = 0; r < rows; ++r) {
    const float* sr = score + static_cast<size_t>(r) * np;
    float top = kNegInf;
    if (all) {
      top = *std::max_element(sr, sr + np);
      for (int p = 0; p < np; ++p) best[static_cast<size_t>(p)] = std::max(best[static_cast<size_t>(p)], sr[p] - top);
      continue;
    }
    for (int i = 0; i < n; ++i) top = std::max(top, sr[among[i]]);
    for (int i = 0; i < n; ++i) best[static_cast<size_t>(among[i])] = std::max(best[static_cast<size_t>(among[i])], sr[among[i]] - top);
  }
  out->clear();
  want = std::min(want, n);
  if (want <= 0) return;
  // The want-th largest value, found among the values themselves (no comparator reaching through
  // indices); then the pages above it, and of the pages at it the latest ones.
  sorted.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sorted[static_cast<size_t>(i)] = best[static_cast<size_t>(among[i])];
  std::nth_element(sorted.begin(), sorted.begin() + (want - 1), sorted.end(), std::greater<float>());
  const float at = sorted[static_cast<size_t>(want - 1)];
  int above = 0;
  for (int i = 0; i < n; ++i) above += best[static_cast<size_t>(among[i])] > at;
  int ties = want - above;
  for (int i = n - 1; i >= 0; --i) {
    const float b = best[static_cast<size_t>(among[i])];
    if (b > at || (b == at && ties-- > 0)) out->push_back(among[i]);
  }
  std::sort(out->begin(), out->end());
}
}  // namespace

void RecallStore::select(const float* const* q, int rows, int want, std::vector<int>* pages) const {
  const int np = n_pages();
  if (want <= 0 || np == 0 || want >= np) return select_scored(q, nullptr, rows, want, pages);
  thread_local std::vector<float> score;
  score.resize(static_cast<size_t>(rows) * np);
  page_scores(q, rows, 0, np, score.data());
  select_scored(q, score.data(), rows, want, pages);
}

void RecallStore::select_scored(const float* const* q, const float* score, int rows, int want, std::vector<int>* pages) const {
  pages->clear();
  const int np = n_pages();
  if (want <= 0 || np == 0) return;
  if (want >= np) {
    pages->resize(static_cast<size_t>(np));
    std::iota(pages->begin(), pages->end(), 0);
    return;
  }
  thread_local std::vector<int> all;
  all.resize(static_cast<size_t>(np));
  std::iota(all.begin(), all.end(), 0);
  if (!shortlists()) return rank_pages(score, np, rows, all.data(), np, want, pages);
  // The first pass shortlists kShortlist * want pages (all of them when that is every page); their
  // keys choose `want`, relative to each row's best key score among the shortlisted pages.
  thread_local std::vector<int> shortlist;
  thread_local std::vector<float> keys;
  if (kShortlist * want < np) rank_pages(score, np, rows, all.data(), np, kShortlist * want, &shortlist);
  else shortlist = all;
  keys.resize(static_cast<size_t>(rows) * np);
  key_scores(q, rows, shortlist.data(), static_cast<int>(shortlist.size()), keys.data());
  rank_pages(keys.data(), np, rows, shortlist.data(), static_cast<int>(shortlist.size()), want, pages);
}

bool RecallStore::holds_choice(int every, const float* const* q, int rows) const {
  if (held_uses_ <= 0 || held_uses_ >= every || held_q_.size() != static_cast<size_t>(rows) * d_) return false;
  for (int r = 0; r < rows; ++r) {
    const float* u = held_q_.data() + static_cast<size_t>(r) * d_;
    const float qq = dot_f32(q[r], q[r], d_);
    if (!(dot_f32(q[r], u, d_) >= kHoldCos * std::sqrt(qq))) return false;
  }
  return true;
}

void RecallStore::hold_choice(const std::vector<int>& pages, const float* const* q, int rows) const {
  held_ = pages;
  held_pages_ = n_pages();
  held_uses_ = 1;
  held_q_.resize(static_cast<size_t>(rows) * d_);
  for (int r = 0; r < rows; ++r) {
    const float n = std::sqrt(dot_f32(q[r], q[r], d_)), inv = n > 0.0f ? 1.0f / n : 0.0f;
    for (int i = 0; i < d_; ++i) held_q_[static_cast<size_t>(r) * d_ + i] = q[r][i] * inv;
  }
}

const std::vector<int>& RecallStore::held_choice() const {
  ++held_uses_;
  // The choice (increasing, of pages before held_pages_), then every page from the one last then:
  // increasing without a sort.
  const int from = std::max(0, held_pages_ - 1);
  held_view_.clear();
  for (const int p : held_)
    if (p < from) held_view_.push_back(p);
  for (int p = from; p < n_pages(); ++p) held_view_.push_back(p);
  return held_view_;
}

void RecallStore::attend(const float* const* q, const int32_t* qpos, int rows, int window, float softcap,
                         const std::vector<int>& pages, float* acc, float* m, float* l, RecallCover* cover,
                         float* cover_buf) const {
  const size_t d = static_cast<size_t>(d_);
  // The pages are read in place by the exact cache's tiled kernel (RowBlock::attend_paged): select
  // and held_choice give increasing pages, so the store's short last page, when chosen, is last.
  // With a cover, the recalled rows' sums are needed too: row by row below.
  const bool short_last = pages.empty() || std::all_of(pages.begin(), pages.end() - 1, [&](int p) { return page_tokens(p) == page_; });
  if (!cover && rows > 0 && rows <= kLanes && page_ > 0 && short_last) {
    thread_local RowBlock block;
    block.begin(q, qpos, rows, d_, softcap);
    const PagedRows pr{type_, k_.data(), v_.data(), row_, pos_.data(), n_, page_, pages.data(), static_cast<int>(pages.size())};
    block.attend_paged(pr, window);
    block.finish(acc, m, l);
    return;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
  std::fill(acc, acc + rows * d, 0.0f);
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  if (cover) {
    std::fill(cover_buf, cover_buf + 2 * rows * d, 0.0f);
    for (int r = 0; r < rows; ++r) cover[r] = RecallCover{0.0f, 0.0f, cover_buf + 2 * r * d, cover_buf + (2 * r + 1) * d};
  }
  thread_local std::vector<float> ks, vs, x, raw;
  ks.resize(static_cast<size_t>(page_) * d);
  vs.resize(static_cast<size_t>(page_) * d);
  x.resize(static_cast<size_t>(page_));
  raw.resize(static_cast<size_t>(page_));
  for (const int p : pages) {
    const int j0 = p * page_, cnt = page_tokens(p);
    kv_load_rows(type_, k_.data() + static_cast<size_t>(j0) * row_, ks.data(), cnt, d_);
    kv_load_rows(type_, v_.data() + static_cast<size_t>(j0) * row_, vs.data(), cnt, d_);
    for (int r = 0; r < rows; ++r) {
      float top = kNegInf;
      for (int j = 0; j < cnt; ++j) {
        const bool seen = key_visible(pos_[static_cast<size_t>(j0 + j)], qpos[r], window);
        raw[static_cast<size_t>(j)] = seen ? dot_f32(q[r], ks.data() + j * d, d_) * scale : kNegInf;
        x[static_cast<size_t>(j)] = seen ? soft_cap(raw[static_cast<size_t>(j)], softcap) : kNegInf;
        top = std::max(top, x[static_cast<size_t>(j)]);
      }
      if (top == kNegInf) continue;
      float* a = acc + r * d;
      const float m_new = std::max(m[r], top);
      const float c = std::exp(m[r] - m_new);  // 0 on the first visible page
      l[r] *= c;
      for (size_t i = 0; i < d; ++i) a[i] *= c;
      for (int j = 0; j < cnt; ++j) {
        const float xj = x[static_cast<size_t>(j)];
        if (xj == kNegInf) continue;
        const float e = std::exp(xj - m_new);
        l[r] += e;
        axpy_f32(e, vs.data() + j * d, a, d_);
        if (cover) {
          RecallCover& cv = cover[r];
          cv.n += 1.0f;
          const float rj = raw[static_cast<size_t>(j)];
          cv.sx += rj;
          axpy_f32(1.0f, vs.data() + j * d, cover_buf + 2 * r * d, d_);
          axpy_f32(rj, vs.data() + j * d, cover_buf + (2 * r + 1) * d, d_);
        }
      }
      m[r] = m_new;
    }
  }
}

void RecallStore::count_read() const noexcept {
  // The mapping's pages queries recalled go back to the page cache every kReleaseEvery calls.
  if (file_backed() && (reads_.fetch_add(1, std::memory_order_relaxed) + 1) % kReleaseEvery == 0) release_pages(0, n_pages());
}

void RecallStore::load(int j, float* k, float* v) const {
  if (j < 0 || j >= n_) fail("internal: recall store row " + std::to_string(j) + " of " + std::to_string(n_));
  kv_load_rows(type_, k_.data() + static_cast<size_t>(j) * row_, k, 1, d_);
  kv_load_rows(type_, v_.data() + static_cast<size_t>(j) * row_, v, 1, d_);
}

void merge_softmax(float& m, float& l, float* acc, float m2, float l2, const float* acc2, int d) {
  if (m2 == kNegInf) return;
  const float m_new = std::max(m, m2);
  const float a = std::exp(m - m_new), b = std::exp(m2 - m_new);
  for (int i = 0; i < d; ++i) acc[i] = a * acc[i] + b * acc2[i];
  l = a * l + b * l2;
  m = m_new;
}

}  // namespace slake
