#include "slake/kv/attention_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "slake/cpu/prefetch.h"
#include "slake/error.h"

namespace slake {

namespace {
constexpr int kKeys = 16;  // keys per tile of the online softmax
constexpr int kPrefetchTiles = 4;  // how far ahead PageTiles asks for its rows

// The register-blocked loops below work on native-width parts of the lanes (lanes.h): one part
// with AVX-512, two of 8 floats with AVX2, four of 4 elsewhere. Written on whole 16-lane vectors,
// GCC keeps AVX2's accumulators in memory and shuffles them through general registers (5 GFLOP/s).
inline part_f load_part(const lanes_f* v, int part) { return part_of<part_f>(*v, part); }
inline void store_part(lanes_f* v, int part, part_f x) { set_part(*v, part, x); }

// Score chains held at once (of 32 registers with AVX-512, of 16 with AVX2), and value
// dimensions per block in the P V product.
constexpr int kScoreKeys = kPartLanes == 16 ? 16 : 8;
constexpr int kDims = 8;
static_assert(kKeys % kScoreKeys == 0, "a tile's scores go in whole blocks");

// s[j] = sum_i q_t[i] * k[j * d + i]: the scores of kKeys consecutive keys, kScoreKeys independent
// chains at a time. Keys (and values) are addressed from one base pointer: an array of 16 row
// pointers is what GCC packs into vectors and unpacks again on AVX2.
inline void score_tile(const lanes_f* q_t, const float* k, int d, lanes_f* s) {
  for (int part = 0; part < kParts; ++part)
    for (int j0 = 0; j0 < kKeys; j0 += kScoreKeys) {
      part_f acc[kScoreKeys];
      for (int j = 0; j < kScoreKeys; ++j) acc[j] = part_f{};
      for (int i = 0; i < d; ++i) {
        const part_f qi = load_part(q_t + i, part);
        for (int j = 0; j < kScoreKeys; ++j) acc[j] += qi * k[(j0 + j) * d + i];
      }
      for (int j = 0; j < kScoreKeys; ++j) store_part(s + j0 + j, part, acc[j]);
    }
}

// acc_t[i] += sum_j p[j] * v[j * d + i] for i in [i0, i0 + W): W independent accumulator chains.
template <int W>
inline void pv_block(lanes_f* acc_t, const lanes_f* p, const float* v, int d, int i0) {
  for (int part = 0; part < kParts; ++part) {
    part_f o[W];
    for (int w = 0; w < W; ++w) o[w] = load_part(acc_t + i0 + w, part);
    for (int j = 0; j < kKeys; ++j) {
      const part_f pj = load_part(p + j, part);
      for (int w = 0; w < W; ++w) o[w] += pj * v[j * d + i0 + w];
    }
    for (int w = 0; w < W; ++w) store_part(acc_t + i0 + w, part, o[w]);
  }
}

// The kKeys keys (or values) of the tile at j0 as floats: in place for a whole tile of an f32
// cache, else read into `buf` (a tile, never the whole cache). A short last tile (nk < kKeys)
// repeats its last row (those lanes are masked).
const float* tile_rows(const KvHead& kv, bool keys, int j0, int nk, int d, std::vector<float>& buf) {
  const KvType t = keys ? kv.type_k : kv.type_v;
  if (nk == kKeys && t == KvType::F32) return reinterpret_cast<const float*>(keys ? kv.key_row(j0) : kv.value_row(j0));
  buf.resize(static_cast<size_t>(kKeys) * d);
  if (keys) kv.load_keys(j0, nk, d, buf.data());
  else kv.load_values(j0, nk, d, buf.data());
  for (int j = nk; j < kKeys; ++j)
    std::memcpy(buf.data() + static_cast<size_t>(j) * d, buf.data() + static_cast<size_t>(nk - 1) * d,
                static_cast<size_t>(d) * sizeof(float));
  return buf.data();
}

// Where the tiles' rows come from: a head of the cache, in position order (HeadTiles), or pages of
// rows kept elsewhere (PageTiles, a recall store's chosen pages), whose positions need not be in
// order. keys()/values() give a tile's kKeys rows as floats (tile_rows), pos() its nk positions.
struct HeadTiles {
  const KvHead& kv;
  static constexpr bool kSorted = true;
  const float* keys(int j0, int nk, int d, std::vector<float>& buf) const { return tile_rows(kv, true, j0, nk, d, buf); }
  const float* values(int j0, int nk, int d, std::vector<float>& buf) const { return tile_rows(kv, false, j0, nk, d, buf); }
  const int32_t* pos(int j0, int) const { return kv.pos.data() + j0; }
  void prefetch(int, int) const {}  // one run: the hardware's streams follow it
};

struct PageTiles {
  const PagedRows& pr;
  static constexpr bool kSorted = false;
  // Row f of the pages' concatenation, in the store.
  size_t row(int f) const { return static_cast<size_t>(pr.pages[f / pr.page]) * static_cast<size_t>(pr.page) + static_cast<size_t>(f % pr.page); }
  // Whether the tile's rows lie in one page, in a run of the store (always with pages of a multiple of kKeys).
  bool in_one_page(int j0, int nk) const { return j0 % pr.page + nk <= pr.page; }
  const float* load(const uint8_t* base, int j0, int nk, int d, std::vector<float>& buf) const {
    const bool run = in_one_page(j0, nk);
    if (run && nk == kKeys && pr.type == KvType::F32) return reinterpret_cast<const float*>(base + row(j0) * pr.row_bytes);
    buf.resize(static_cast<size_t>(kKeys) * d);
    if (run) kv_load_rows(pr.type, base + row(j0) * pr.row_bytes, buf.data(), nk, d);
    else
      for (int j = 0; j < nk; ++j) kv_load_rows(pr.type, base + row(j0 + j) * pr.row_bytes, buf.data() + static_cast<size_t>(j) * d, 1, d);
    for (int j = nk; j < kKeys; ++j)
      std::memcpy(buf.data() + static_cast<size_t>(j) * d, buf.data() + static_cast<size_t>(nk - 1) * d, static_cast<size_t>(d) * sizeof(float));
    return buf.data();
  }
  const float* keys(int j0, int nk, int d, std::vector<float>& buf) const { return load(pr.k, j0, nk, d, buf); }
  const float* values(int j0, int nk, int d, std::vector<float>& buf) const { return load(pr.v, j0, nk, d, buf); }
  // The tile's positions: in place within a page, else gathered (the kernels read them before the next tile's).
  const int32_t* pos(int j0, int nk) const {
    if (in_one_page(j0, nk)) return pr.pos + row(j0);
    for (int j = 0; j < nk; ++j) gathered[j] = pr.pos[row(j0 + j)];
    return gathered;
  }
  // Asks for the rows of tile j0 (below j_end) ahead of their use: the chosen pages lie at random
  // in a store much larger than the caches, where each page's first lines wait on memory.
  void prefetch(int j0, int j_end) const {
    if (j0 >= j_end) return;
    const int nk = std::min(kKeys, j_end - j0);
    const bool run = in_one_page(j0, nk);
    for (const uint8_t* base : {pr.k, pr.v})
      for (int j = 0; j < (run ? 1 : nk); ++j) prefetch_bytes(base + row(j0 + j) * pr.row_bytes, (run ? nk : 1) * pr.row_bytes);
  }
  mutable int32_t gathered[kKeys];
};

// The few-rows kernel (attention_rows.h), on vectors of 8 lanes (AVX2) or 16: with 4 lanes the
// lanes kernel is kept.
constexpr int kFewRowsMost = 4;  // what the kernel's register blocking is sized for
constexpr int kFewRows = kPartLanes >= 8 ? kFewRowsMost : 0;
// Head dimensions whose accumulators a P V pass keeps in registers: 4 rows x 4 vectors of 16
// with AVX-512, 4 rows x 2 vectors of 8 with AVX2.
constexpr int kFewDims = kPartLanes == 16 ? 64 : 16;

// out[j] = the sum of t[j]'s sixteen lanes: a transposition by halves, each level adding pairs.
inline lanes_f transpose_sum(const lanes_f* t) {
  lanes_f a[8], b[4], c[2];
  for (int j = 0; j < 8; ++j)  // a[j]: 8 partial sums of t[j], then 8 of t[j + 8]
    a[j] = __builtin_shufflevector(t[j], t[j + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(t[j], t[j + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int j = 0; j < 4; ++j)  // b[j]: 4 each of t[j], t[j + 4], t[j + 8], t[j + 12]
    b[j] = __builtin_shufflevector(a[j], a[j + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           __builtin_shufflevector(a[j], a[j + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int j = 0; j < 2; ++j)  // c[j]: 2 each of t[j], t[j + 2], ..., t[j + 14]
    c[j] = __builtin_shufflevector(b[j], b[j + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           __builtin_shufflevector(b[j], b[j + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  return __builtin_shufflevector(c[0], c[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
         __builtin_shufflevector(c[0], c[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}

inline part_f load_pf(const float* p) {
  part_f x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
inline void store_pf(float* p, part_f x) { std::memcpy(p, &x, sizeof x); }

// out[j] = the sum of t[j]'s 8 lanes (AVX2's parts): the last three steps of transpose_sum.
inline part_f transpose_sum8(const part_f* t) {
#if defined(__AVX__) && !defined(__AVX512F__)  // kPartLanes 8, as lanes.h chooses
  part_f a[4], b[2];
  for (int j = 0; j < 4; ++j)  // a[j]: 4 partial sums of t[j], then 4 of t[j + 4]
    a[j] = __builtin_shufflevector(t[j], t[j + 4], 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(t[j], t[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  for (int j = 0; j < 2; ++j)  // b[j]: 2 each of t[j], t[j + 2], t[j + 4], t[j + 6]
    b[j] = __builtin_shufflevector(a[j], a[j + 2], 0, 1, 8, 9, 4, 5, 12, 13) + __builtin_shufflevector(a[j], a[j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
  return __builtin_shufflevector(b[0], b[1], 0, 8, 2, 10, 4, 12, 6, 14) + __builtin_shufflevector(b[0], b[1], 1, 9, 3, 11, 5, 13, 7, 15);
#else
  (void)t;
  return part_f{};  // not used: score_keys sums whole 16-lane vectors
#endif
}

// Lane j: q . k_j for the 16 keys of a tile (rows of d floats from k), d a multiple of 16. With
// AVX2, 8 keys at a time, so that their chains stay in registers (16 vectors of 16 lanes would
// take all of AVX2's registers twice over).
inline lanes_f score_keys(const float* q, const float* k, int d) {
  if constexpr (kPartLanes == 8) {
    lanes_f out;
    for (int g = 0; g < kParts; ++g) {
      // Each key's dimensions summed in the 16-lane kernel's order: chains over i, i + 16, ...
      // for each lane i of 16, its lanes i and i + 8 added first, so that the scores are the
      // same to the bit.
      part_f t[kPartLanes];
      for (int j = 0; j < kPartLanes; ++j) {
        const float* kj = k + static_cast<size_t>(g * kPartLanes + j) * d;
        part_f lo[kLanes / kPartLanes];
        for (int h = 0; h < kLanes / kPartLanes; ++h) lo[h] = load_pf(q + h * kPartLanes) * load_pf(kj + h * kPartLanes);
        for (int i = kLanes; i < d; i += kLanes)
          for (int h = 0; h < kLanes / kPartLanes; ++h) lo[h] += load_pf(q + i + h * kPartLanes) * load_pf(kj + i + h * kPartLanes);
        part_f acc = lo[0];
        for (int h = 1; h < kLanes / kPartLanes; ++h) acc += lo[h];
        t[j] = acc;
      }
      set_part(out, g, transpose_sum8(t));
    }
    return out;
  }
  lanes_f t[kKeys];
  for (int j = 0; j < kKeys; ++j) {
    const float* kj = k + static_cast<size_t>(j) * d;
    lanes_f acc = load_lanes(q) * load_lanes(kj);
    for (int i = 16; i < d; i += 16) acc += load_lanes(q + i) * load_lanes(kj + i);
    t[j] = acc;
  }
  return transpose_sum(t);
}

inline float lanes_hmax(lanes_f v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = std::max(m, v[i]);
  return m;
}
inline float lanes_hsum(lanes_f v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// acc[r][i] += sum_j p[r][j] v_j[i] for n rows, the dimensions in passes of kFewDims whose
// accumulators stay in registers while the tile's values stream through.
inline void pv_few(float* acc, const float (*p)[kKeys], const float* v, int n, int d) {
  // The same on AVX2's parts, every pass whole (d is a multiple of 16): with the 16-lane
  // branch's run-time pass width, BM_attention/3 ran 8-10% slower on AVX2.
  if constexpr (kPartLanes == 8) {
    constexpr int kW = kFewDims / kPartLanes;
    for (int i0 = 0; i0 < d; i0 += kFewDims) {
      part_f o[kFewRowsMost][kW];
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < kW; ++c) o[r][c] = load_pf(acc + static_cast<size_t>(r) * d + i0 + kPartLanes * c);
      for (int j = 0; j < kKeys; ++j) {
        const float* vj = v + static_cast<size_t>(j) * d + i0;
        part_f vv[kW];
        for (int c = 0; c < kW; ++c) vv[c] = load_pf(vj + kPartLanes * c);
        for (int r = 0; r < n; ++r) {
          const float pj = p[r][j];
          for (int c = 0; c < kW; ++c) o[r][c] += pj * vv[c];
        }
      }
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < kW; ++c) store_pf(acc + static_cast<size_t>(r) * d + i0 + kPartLanes * c, o[r][c]);
    }
    return;
  }
  for (int i0 = 0; i0 < d; i0 += kFewDims) {
    const int w = std::min(kFewDims, d - i0) / 16;
    lanes_f o[kFewRowsMost][kFewDims / 16];
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < w; ++c) o[r][c] = load_lanes(acc + static_cast<size_t>(r) * d + i0 + 16 * c);
    for (int j = 0; j < kKeys; ++j) {
      const float* vj = v + static_cast<size_t>(j) * d + i0;
      lanes_f vv[kFewDims / 16];
      for (int c = 0; c < w; ++c) vv[c] = load_lanes(vj + 16 * c);
      for (int r = 0; r < n; ++r) {
        const float pj = p[r][j];
        for (int c = 0; c < w; ++c) o[r][c] += pj * vv[c];
      }
    }
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < w; ++c) store_lanes(acc + static_cast<size_t>(r) * d + i0 + 16 * c, o[r][c]);
  }
}
}  // namespace

void RowBlock::begin(const float* const* q, const int32_t* qpos, int n, int d, float softcap) {
  if (n < 1 || n > kLanes) fail("attend_rows: " + std::to_string(n) + " rows, want 1.." + std::to_string(kLanes));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  n_ = n;
  d_ = d;
  cap_ = softcap;
  few_ = n <= kFewRows && d % 16 == 0;
  m_ = splat(-std::numeric_limits<float>::infinity());
  l_ = lanes_f{};
  qp_ = splat_i(-1);  // a missing row sees nothing: every key position is >= 0
  q_min_ = std::numeric_limits<int32_t>::max();
  q_max_ = -1;
  for (int r = 0; r < n; ++r) {
    qp_[r] = qpos[r];
    q_min_ = std::min(q_min_, qpos[r]);
    q_max_ = std::max(q_max_, qpos[r]);
  }
  if (few_) {  // queries and accumulators row by row
    q_r_.resize(static_cast<size_t>(n) * d);
    acc_r_.assign(static_cast<size_t>(n) * d, 0.0f);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < d; ++i) q_r_[static_cast<size_t>(r) * d + i] = q[r][i] * scale;
    return;
  }
  q_t_.assign(static_cast<size_t>(d), lanes_f{});
  acc_t_.assign(static_cast<size_t>(d), lanes_f{});
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < d; ++i) q_t_[static_cast<size_t>(i)][r] = q[r][i] * scale;
}

std::pair<int, int> RowBlock::key_range(const KvHead& kv, int window) const {
  // Positions are sorted, so the keys any row can see are one range.
  const int32_t* kpos = kv.pos.data();
  const int end = static_cast<int>(std::upper_bound(kpos, kpos + kv.n, q_max_) - kpos);
  const int begin = window > 0 ? static_cast<int>(std::upper_bound(kpos, kpos + end, q_min_ - window) - kpos) : 0;
  return {begin, end};
}

void RowBlock::attend(const KvHead& kv, int window, int j_begin, int j_end) { attend_tiles(HeadTiles{kv}, nullptr, window, j_begin, j_end); }

void RowBlock::attend_scored(const KvHead& kv, const lanes_f* x, int window, int j_begin, int j_end) {
  attend_tiles(HeadTiles{kv}, x, window, j_begin, j_end);
}

void RowBlock::attend_paged(const PagedRows& rows, int window) {
  if (rows.page < 1) fail("internal: attend_paged takes pages of at least one row");
  int n = 0;
  for (int i = 0; i < rows.n_pages; ++i) {
    const int p = rows.pages[i], cnt = std::min(rows.page, rows.n_rows - p * rows.page);
    if (p < 0 || cnt <= 0 || (i > 0 && p <= rows.pages[i - 1]))
      fail("internal: attend_paged's pages are not increasing pages of the store");
    if (cnt < rows.page && i + 1 < rows.n_pages) fail("internal: attend_paged's short page is not the last");
    n += cnt;
  }
  if (n > 0) attend_tiles(PageTiles{rows, {}}, nullptr, window, 0, n);
}

template <class Src>
void RowBlock::attend_tiles(const Src& src, const lanes_f* x, int window, int j_begin, int j_end) {
  if (few_) return attend_tiles_few(src, x, window, j_begin, j_end);
  const int d = d_;
  const lanes_f neg_inf = splat(-std::numeric_limits<float>::infinity());
  for (int j0 = j_begin; j0 < j_end; j0 += kKeys) {
    const int nk = std::min(kKeys, j_end - j0);
    src.prefetch(j0 + kPrefetchTiles * kKeys, j_end);
    thread_local std::vector<float> tail_k, tail_v;
    const float* v = src.values(j0, nk, d, tail_v);
    const int32_t* kpos = src.pos(j0, nk);

    lanes_f s[kKeys];
    if (x) {  // scores computed already: the tile's keys are not read at all
      for (int j = 0; j < kKeys; ++j) s[j] = j < nk ? x[j0 + j] : neg_inf;
    } else {
      score_tile(q_t_.data(), src.keys(j0, nk, d, tail_k), d, s);
      if (cap_ > 0.0f)
        for (int j = 0; j < kKeys; ++j) s[j] = capped(s[j]);
    }
    // Masking is needed only where some row cannot see some key of the tile.
    int32_t first = kpos[0], last = kpos[nk - 1];
    if constexpr (!Src::kSorted)
      for (int j = 1; j < nk; ++j) first = std::min(first, kpos[j]), last = std::max(last, kpos[j]);
    const bool all_visible = nk == kKeys && last <= q_min_ && (window <= 0 || first > q_max_ - window);
    if (!all_visible)
      for (int j = 0; j < kKeys; ++j) {
        if (j >= nk) {
          s[j] = neg_inf;
          continue;
        }
        const lanes_i kp = splat_i(kpos[j]);
        const lanes_i seen = window > 0 ? (lanes_le_i(kp, qp_) & lanes_gt_i(kp, qp_ - window)) : lanes_le_i(kp, qp_);
        s[j] = lanes_select(seen, s[j], neg_inf);
      }

    lanes_f tile_max = s[0];
    for (int j = 1; j < kKeys; ++j) tile_max = lanes_max(tile_max, s[j]);
    const lanes_f m_new = lanes_max(m_, tile_max);
    // A row that has seen nothing yet keeps m = -inf; measure it from 0 so no -inf - -inf appears.
    const lanes_f ref = lanes_select(lanes_eq(m_new, neg_inf), lanes_f{}, m_new);
    const lanes_i grew = lanes_gt(m_new, m_);
    bool any_grew = false;
    for (int r = 0; r < kLanes; ++r) any_grew |= grew[r] != 0;
    if (any_grew) {
      const lanes_f corr = lanes_exp(m_ - ref);
      l_ *= corr;
      for (int i = 0; i < d; ++i) acc_t_[static_cast<size_t>(i)] *= corr;
    }
    m_ = m_new;

    lanes_f p[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      p[j] = lanes_exp(s[j] - ref);
      l_ += p[j];
    }
    int i0 = 0;
    for (; i0 + kDims <= d; i0 += kDims) pv_block<kDims>(acc_t_.data(), p, v, d, i0);
    for (; i0 < d; ++i0) pv_block<1>(acc_t_.data(), p, v, d, i0);
  }
}

template <class Src>
void RowBlock::attend_tiles_few(const Src& src, const lanes_f* x, int window, int j_begin, int j_end) {
  const int d = d_, n = n_;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const lanes_f neg_inf_l = splat(neg_inf);
  thread_local std::vector<float> tail_k, tail_v;
  float p[kLanes][kKeys];
  for (int j0 = j_begin; j0 < j_end; j0 += kKeys) {
    const int nk = std::min(kKeys, j_end - j0);
    src.prefetch(j0 + kPrefetchTiles * kKeys, j_end);
    const float* v = src.values(j0, nk, d, tail_v);
    const float* k = x ? nullptr : src.keys(j0, nk, d, tail_k);
    const int32_t* kpos = src.pos(j0, nk);
    lanes_i kp = splat_i(std::numeric_limits<int32_t>::max());
    for (int j = 0; j < nk; ++j) kp[j] = kpos[j];
    bool any = false;
    for (int r = 0; r < n; ++r) {
      lanes_f s;
      if (x) {
        for (int j = 0; j < kKeys; ++j) s[j] = j < nk ? x[j0 + j][r] : neg_inf;
      } else {
        s = capped(score_keys(&q_r_[static_cast<size_t>(r) * d], k, d));
      }
      const lanes_i qp = splat_i(qp_[r]);
      const lanes_i seen = window > 0 ? (lanes_le_i(kp, qp) & lanes_gt_i(kp, qp - window)) : lanes_le_i(kp, qp);
      s = lanes_select(seen, s, neg_inf_l);
      const float m_new = std::max(m_[r], lanes_hmax(s));
      if (m_new == neg_inf) {  // this row sees none of the tile's keys, nor any before
        for (int j = 0; j < kKeys; ++j) p[r][j] = 0.0f;
        continue;
      }
      if (m_new > m_[r]) {
        const float corr = std::exp(m_[r] - m_new);  // 0 on the row's first keys
        l_[r] *= corr;
        float* a = &acc_r_[static_cast<size_t>(r) * d];
        for (int i = 0; i < d; ++i) a[i] *= corr;
        m_[r] = m_new;
      }
      const lanes_f e = lanes_exp(s - m_new);
      l_[r] += lanes_hsum(e);
      store_lanes(p[r], e);
      any = true;
    }
    if (any) pv_few(acc_r_.data(), p, v, n, d);
  }
}

void RowBlock::scores_few(const KvHead& kv, int n_keys, lanes_f* x) const {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  thread_local std::vector<float> tail_k;
  for (int j0 = 0; j0 < n_keys; j0 += kKeys) {
    const int nk = std::min(kKeys, n_keys - j0);
    const float* k = tile_rows(kv, true, j0, nk, d_, tail_k);
    for (int j = 0; j < nk; ++j) x[j0 + j] = splat(neg_inf);  // lanes without a row see nothing
    for (int r = 0; r < n_; ++r) {
      const lanes_f s = capped(score_keys(&q_r_[static_cast<size_t>(r) * d_], k, d_));
      for (int j = 0; j < nk; ++j) x[j0 + j][r] = kv.pos[static_cast<size_t>(j0 + j)] <= qp_[r] ? s[j] : neg_inf;
    }
  }
}

void RowBlock::scores(const KvHead& kv, int n_keys, lanes_f* x) const {
  if (few_) return scores_few(kv, n_keys, x);
  const lanes_f neg_inf = splat(-std::numeric_limits<float>::infinity());
  for (int j0 = 0; j0 < n_keys; j0 += kKeys) {
    const int nk = std::min(kKeys, n_keys - j0);
    thread_local std::vector<float> tail_k;
    const float* k = tile_rows(kv, true, j0, nk, d_, tail_k);
    lanes_f s[kKeys];
    score_tile(q_t_.data(), k, d_, s);
    for (int j = 0; j < nk; ++j)
      x[j0 + j] = lanes_select(lanes_le_i(splat_i(kv.pos[static_cast<size_t>(j0 + j)]), qp_), capped(s[j]), neg_inf);
  }
}

void RowBlock::finish(float* acc, float* m, float* l) const {
  if (few_) {
    for (int r = 0; r < n_; ++r) {
      m[r] = m_[r];
      l[r] = l_[r];
      std::memcpy(acc + static_cast<size_t>(r) * d_, &acc_r_[static_cast<size_t>(r) * d_], static_cast<size_t>(d_) * sizeof(float));
    }
    return;
  }
  for (int r = 0; r < n_; ++r) {
    m[r] = m_[r];
    l[r] = l_[r];
    for (int i = 0; i < d_; ++i) acc[static_cast<size_t>(r) * d_ + i] = acc_t_[static_cast<size_t>(i)][r];
  }
}

lanes_f score_tile_of_keys(const float* q, const float* k, int d) { return score_keys(q, k, d); }

void attend_rows(const float* const* q, const int32_t* qpos, int n, const KvHead& kv, int d, int window, float softcap,
                 float* acc, float* m, float* l) {
  thread_local RowBlock block;
  block.begin(q, qpos, n, d, softcap);
  const auto [j_begin, j_end] = block.key_range(kv, window);
  block.attend(kv, window, j_begin, j_end);
  block.finish(acc, m, l);
}

}  // namespace slake
