#include "slake/kv/kv_recall.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "slake/cpu/ops.h"
#include "slake/error.h"
#include "slake/kv/attention.h"
#include "slake/kv/attention_rows.h"
#include "slake/model/softcap.h"
#include "slake/quant/quant_dot.h"

namespace slake {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

const std::vector<std::string>& recall_score_names() {
  static const std::vector<std::string> names{"keys", "quest"};
  return names;
}

RecallScore parse_recall_score(const std::string& name) {
  if (name == "keys") return RecallScore::Keys;
  if (name == "quest") return RecallScore::Quest;
  fail("unknown recall score '" + name + "' (keys, quest)");
}

const char* recall_score_name(RecallScore s) { return s == RecallScore::Quest ? "quest" : "keys"; }

RecallStore::RecallStore(int head_dim, int page, KvType type, RecallScore score, std::shared_ptr<const std::string> file_dir)
    : d_(head_dim), page_(page), type_(type), score_(score), k_(StoreAllocator<uint8_t>(file_dir)), v_(StoreAllocator<uint8_t>(file_dir)) {
  if (page < 1) fail("recall page size must be positive, got " + std::to_string(page));
  if (kv_is_kivi(type)) fail(std::string("the recall store keeps rows; ") + kv_type_name(type) + " is not a row type");
  check_kv_type(type, head_dim, "--kv-store-type");
  row_ = kv_row_bytes(type, head_dim);
}

RecallStore::RecallStore(const RecallStore& o)
    : d_(o.d_), page_(o.page_), type_(o.type_), score_(o.score_), row_(o.row_), n_(o.n_), k_(o.k_), v_(o.v_), pos_(o.pos_),
      summary_(o.summary_) {
  release_all();
  o.release_all();  // read whole to copy it
}

RecallStore& RecallStore::operator=(const RecallStore& o) {
  if (this == &o) return *this;
  d_ = o.d_, page_ = o.page_, type_ = o.type_, score_ = o.score_, row_ = o.row_, n_ = o.n_;
  k_ = o.k_, v_ = o.v_, pos_ = o.pos_, summary_ = o.summary_;
  reads_ = 0, written_ = 0;
  release_all();
  o.release_all();
  return *this;
}

RecallStore::RecallStore(RecallStore&& o) noexcept
    : d_(o.d_), page_(o.page_), type_(o.type_), score_(o.score_), row_(o.row_), n_(o.n_), k_(std::move(o.k_)),
      v_(std::move(o.v_)), pos_(std::move(o.pos_)), summary_(std::move(o.summary_)), reads_(o.reads_.load()), written_(o.written_) {}

RecallStore& RecallStore::operator=(RecallStore&& o) noexcept {
  d_ = o.d_, page_ = o.page_, type_ = o.type_, score_ = o.score_, row_ = o.row_, n_ = o.n_;
  k_ = std::move(o.k_), v_ = std::move(o.v_), pos_ = std::move(o.pos_), summary_ = std::move(o.summary_);
  reads_ = o.reads_.load(), written_ = o.written_;
  return *this;
}

void RecallStore::check_read() const {
  if (page_ == 0 && n_ == 0 && k_.empty() && v_.empty() && pos_.empty() && summary_.empty()) return;  // no store
  const size_t n = static_cast<size_t>(n_);
  const bool ok = d_ > 0 && page_ > 0 && n_ >= 0 && !kv_is_kivi(type_) && row_ == kv_row_bytes(type_, d_) &&
                  k_.size() == n * row_ && v_.size() == n * row_ && pos_.size() == n &&
                  summary_.size() == (score_ == RecallScore::Quest ? static_cast<size_t>(n_pages()) * 2 * d_ : 0);
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
  if (score_ == RecallScore::Quest) release_store_pages(k_, at, bytes);
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
  if (score_ == RecallScore::Quest) summarise(n);
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
  thread_local std::vector<float> back;
  back.resize(static_cast<size_t>(d_));
  kv_load_rows(type_, k_.data() + n * row_, back.data(), 1, d_);
  const int p = static_cast<int>(n / static_cast<size_t>(page_));
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

void RecallStore::clear() {
  written_ = 0;
  k_.clear();
  v_.clear();
  pos_.clear();
  summary_.clear();
  n_ = 0;
}

size_t RecallStore::planned_bytes(int head_dim, int page, KvType type, int64_t tokens, RecallScore score) {
  if (page < 1 || tokens <= 0) return 0;
  const size_t pages = static_cast<size_t>((tokens + page - 1) / page);
  return static_cast<size_t>(tokens) * (2 * kv_row_bytes(type, head_dim) + sizeof(int32_t)) +
         (score == RecallScore::Quest ? pages * 2 * static_cast<size_t>(head_dim) * sizeof(float) : 0);
}

size_t RecallStore::bytes() const { return active() ? planned_bytes(d_, page_, type_, n_, score_) : 0; }

void RecallStore::page_bounds(const float* q, float* bound) const {
  if (score_ != RecallScore::Quest) fail("internal: page bounds of a store ranked by its keys (no summaries kept)");
  page_scores(&q, 1, 0, n_pages(), bound);
}

void RecallStore::page_scores(const float* const* q, int rows, int p0, int p1, float* score) const {
  const size_t np = static_cast<size_t>(n_pages());
  if (score_ == RecallScore::Quest) {
    thread_local std::vector<float> split;
    split.resize(static_cast<size_t>(2 * d_));
    for (int r = 0; r < rows; ++r) {
      // max(q_i min_i, q_i max_i) is q_i min_i where q_i < 0 and q_i max_i elsewhere.
      for (int i = 0; i < d_; ++i) {
        split[static_cast<size_t>(i)] = std::min(q[r][i], 0.0f);
        split[static_cast<size_t>(d_ + i)] = std::max(q[r][i], 0.0f);
      }
      for (int p = p0; p < p1; ++p) score[static_cast<size_t>(r) * np + p] = dot_f32(split.data(), page_min(p), 2 * d_);
    }
    return;
  }
  if (type_ == KvType::Q8_0) return page_scores_q8_0(q, rows, p0, p1, score);
  // The page's keys as floats, a tile of 16 at a time scored by the attention kernel's tile scorer
  // (lanes over keys, no horizontal sum per key); the lanes of rows past the page's end are not read.
  const bool tiles = d_ % 16 == 0;
  const int padded = (page_ + kLanes - 1) / kLanes * kLanes;
  thread_local std::vector<float> ks;
  ks.resize(static_cast<size_t>(padded) * d_);
  for (int p = p0; p < p1; ++p) {
    const int j0 = p * page_, cnt = std::min(page_, n_ - j0);
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

void RecallStore::page_scores_q8_0(const float* const* q, int rows, int p0, int p1, float* score) const {
  // q8_0 keys against the query rounded to q8_0 blocks once (as ggml's CPU attention does with a
  // q8_0 cache): integer dot products over the stored blocks, no key dequantised
  // (quant_dot.h, dot_tile), kTileRows keys by up to kTileTokens query rows a call.
  const size_t np = static_cast<size_t>(n_pages());
  const size_t act = act_row_bytes(ActFormat::Q8_0, d_);
  thread_local std::vector<uint8_t> qa;
  qa.resize(act * static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) quantize_act_row(ActFormat::Q8_0, q[r], qa.data() + act * static_cast<size_t>(r), d_);
  float out[kTileTokens * kTileRows];
  for (int p = p0; p < p1; ++p) {
    const int j0 = p * page_, cnt = std::min(page_, n_ - j0);
    for (int r0 = 0; r0 < rows; r0 += kTileTokens) {
      const int rn = std::min(kTileTokens, rows - r0);
      float top[kTileTokens];
      std::fill(top, top + kTileTokens, kNegInf);
      for (int t = 0; t < cnt; t += kTileRows) {
        const int rm = std::min(kTileRows, cnt - t);
        dot_tile(DType::Q8_0, d_, k_.data() + static_cast<size_t>(j0 + t) * row_, row_, rm,
                 qa.data() + act * static_cast<size_t>(r0), act, rn, out, kTileRows);
        for (int j = 0; j < rn; ++j)
          for (int i = 0; i < rm; ++i) top[j] = std::max(top[j], out[j * kTileRows + i]);
      }
      for (int j = 0; j < rn; ++j) score[static_cast<size_t>(r0 + j) * np + p] = top[j];
    }
  }
}

void RecallStore::select(const float* const* q, int rows, int want, std::vector<int>* pages) const {
  const int np = n_pages();
  if (want <= 0 || np == 0 || want >= np) return select_scored(nullptr, rows, want, pages);
  thread_local std::vector<float> score;
  score.resize(static_cast<size_t>(rows) * np);
  page_scores(q, rows, 0, np, score.data());
  select_scored(score.data(), rows, want, pages);
}

void RecallStore::select_scored(const float* score, int rows, int want, std::vector<int>* pages) const {
  pages->clear();
  const int np = n_pages();
  if (want <= 0 || np == 0) return;
  if (want >= np) {
    pages->resize(static_cast<size_t>(np));
    std::iota(pages->begin(), pages->end(), 0);
    return;
  }
  // Each row's scores in its own softmax units, relative to its best page; a page ranks by the
  // row that wants it most, so that a page one query head needs is not outvoted by the others.
  thread_local std::vector<float> best;
  best.assign(static_cast<size_t>(np), kNegInf);
  for (int r = 0; r < rows; ++r) {
    const float* sr = score + static_cast<size_t>(r) * np;
    const float top = *std::max_element(sr, sr + np);
    for (int p = 0; p < np; ++p) best[static_cast<size_t>(p)] = std::max(best[static_cast<size_t>(p)], sr[p] - top);
  }
  pages->resize(static_cast<size_t>(np));
  std::iota(pages->begin(), pages->end(), 0);
  // Ties go to the later page, deterministically.
  std::nth_element(pages->begin(), pages->begin() + want, pages->end(), [&](int a, int b) {
    const float x = best[static_cast<size_t>(a)], y = best[static_cast<size_t>(b)];
    return x != y ? x > y : a > b;
  });
  pages->resize(static_cast<size_t>(want));
  std::sort(pages->begin(), pages->end());
}

void RecallStore::attend(const float* const* q, const int32_t* qpos, int rows, int window, float softcap,
                         const std::vector<int>& pages, float* acc, float* m, float* l, RecallCover* cover,
                         float* cover_buf) const {
  const size_t d = static_cast<size_t>(d_);
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
    const int j0 = p * page_, cnt = std::min(page_, n_ - j0);
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
