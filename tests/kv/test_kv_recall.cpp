// The recall store (src/kv/kv_recall.cpp, algorithm.md §9) against float64 brute force: the page
// summaries bound every key's score from above, the pages chosen are the ones the float64 bounds
// rank first, and attention over the exact cache plus the recalled pages (with the Taylor state of
// the rest) equals float64 attention over exactly those rows.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "reference_math.h"
#include "slake/error.h"
#include "slake/kv/attention.h"
#include "slake/kv/kv_recall.h"
#include "slake/kv/kv_scores.h"
#include "slake/quant/dtype.h"
#include "slake/quant/quant_dot.h"
#include "slake/state_archive.h"
#include "test_util.h"

namespace slake {
namespace {

std::vector<float> randn(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

TEST(RecallStore, PageBoundsAreUpperBoundsOfEveryKeyScore) {
  std::mt19937 rng(3);
  const int d = 64, page = 8;
  for (KvType t : {KvType::F32, KvType::Q8_0, KvType::Q4_0}) {
    RecallStore st(d, page, t, RecallScore::Quest);
    for (int j = 0; j < 53; ++j) st.add(randn(d, 1.0f, rng).data(), randn(d, 1.0f, rng).data(), j);
    ASSERT_EQ(st.n_pages(), 7);
    const std::vector<float> q = randn(d, 2.0f, rng);
    std::vector<float> bound(static_cast<size_t>(st.n_pages())), k(d), v(d);
    st.page_bounds(q.data(), bound.data());
    for (int j = 0; j < st.n(); ++j) {
      st.load(j, k.data(), v.data());
      const double qk = test::dot64(q.data(), k.data(), d);
      EXPECT_GE(bound[static_cast<size_t>(j / page)] + 1e-4 * (1 + std::abs(qk)), qk) << kv_type_name(t) << " row " << j;
    }
  }
}

// Shortlist's q8_0 summary of each page, full or filling, holds the float64 minimum and maximum
// of the page's keys as read back, to q8_0's rounding (half a block's step).
TEST(RecallStore, ShortlistSummariesHoldEachPagesKeyRange) {
  std::mt19937 rng(4);
  const int d = 64, page = 8;
  for (KvType t : {KvType::F32, KvType::Q8_0, KvType::Q4_0}) {
    RecallStore st(d, page, t, RecallScore::Shortlist);
    for (int j = 0; j < 53; ++j) st.add(randn(d, 1.0f, rng).data(), randn(d, 1.0f, rng).data(), j);
    ASSERT_EQ(st.n_pages(), 7);
    std::vector<float> k(d), v(d), mm(2 * d);
    for (int p = 0; p < st.n_pages(); ++p) {
      std::vector<double> lo(d, INFINITY), hi(d, -INFINITY);
      for (int j = p * page; j < std::min(st.n(), (p + 1) * page); ++j) {
        st.load(j, k.data(), v.data());
        for (int i = 0; i < d; ++i) lo[static_cast<size_t>(i)] = std::min<double>(lo[static_cast<size_t>(i)], k[static_cast<size_t>(i)]),
                                    hi[static_cast<size_t>(i)] = std::max<double>(hi[static_cast<size_t>(i)], k[static_cast<size_t>(i)]);
      }
      st.page_sketch(p, mm.data());
      for (int b = 0; b < 2 * d; b += 32) {  // each q8_0 block's step is its largest magnitude / 127
        double top = 0;
        for (int i = b; i < b + 32; ++i) top = std::max(top, std::abs(i < d ? lo[static_cast<size_t>(i)] : hi[static_cast<size_t>(i - d)]));
        for (int i = b; i < b + 32; ++i) {
          const double want = i < d ? lo[static_cast<size_t>(i)] : hi[static_cast<size_t>(i - d)];
          EXPECT_NEAR(mm[static_cast<size_t>(i)], want, top / 127 * 0.5 + 1e-3 * top) << kv_type_name(t) << " page " << p << " channel " << i;
        }
      }
    }
  }
  EXPECT_THROW(RecallStore(40, 16, KvType::F32, RecallScore::Shortlist), Error);  // 2 d = 80: not q8_0 blocks
}

// A state file's store whose page score is none of the known ones, or a shortlist over heads
// whose summaries are not q8_0 blocks, is refused when read, not taken as summarised.
TEST(RecallStore, StateWithAnUnknownScoreIsRefused) {
  for (const auto& [score, d] : {std::pair<int, int>{7, 64}, std::pair<int, int>{2, 40}}) {
    StateWriter w;
    w(d, 16, KvType::F32, static_cast<RecallScore>(score), kv_row_bytes(KvType::F32, d), 0, StoreBytes(), StoreBytes(),
      std::vector<int32_t>(), std::vector<float>(), std::vector<uint8_t>(), KeyBasis(), std::vector<uint8_t>());
    RecallStore st;
    StateReader r(w.bytes().data(), w.bytes().size());
    EXPECT_THROW(st.io(r), Error) << score << " " << d;
  }
}

// Lowrank's state: a basis where the store is too small to have fitted one, none where it is large
// enough, or coordinates of the wrong size, are refused; the store's own state reads back.
TEST(RecallStore, LowrankStateMustAgreeWithItsSize) {
  const int d = 32, n = RecallStore::kFitKeysPerDim * d + 5;
  std::mt19937 rng(4);
  RecallStore st(d, 16, KvType::F32, RecallScore::Lowrank);
  for (int j = 0; j < n; ++j) {
    const std::vector<float> k = randn(static_cast<size_t>(d), 1.0f, rng), v = randn(static_cast<size_t>(d), 1.0f, rng);
    st.add(k.data(), v.data(), j);
  }
  ASSERT_TRUE(st.key_basis().fitted());
  StateWriter good;
  st.io(good);
  RecallStore back;
  StateReader r(good.bytes().data(), good.bytes().size());
  back.io(r);
  EXPECT_EQ(back.key_basis().r, d / RecallStore::kLowrankDiv);
  std::vector<float> c1(8), c2(8);
  st.key_coords(n - 1, c1.data());
  back.key_coords(n - 1, c2.data());
  EXPECT_EQ(c1, c2);
  const auto state = [&](int keys, const KeyBasis& basis, size_t coord_bytes) {
    StateWriter w;
    const size_t row = kv_row_bytes(KvType::F32, d);
    w(d, 16, KvType::F32, RecallScore::Lowrank, row, keys, StoreBytes(row * static_cast<size_t>(keys)),
      StoreBytes(row * static_cast<size_t>(keys)), std::vector<int32_t>(static_cast<size_t>(keys)), std::vector<float>(),
      std::vector<uint8_t>(), basis, std::vector<uint8_t>(coord_bytes));
    return w;
  };
  const auto tiles_of = [](int keys) { return static_cast<size_t>(keys + 15) / 16 * (32 + 16 * 8); };
  const size_t tiles = tiles_of(n);
  std::vector<std::pair<StateWriter, bool>> states;
  states.emplace_back(state(n, st.key_basis(), tiles), true);
  states.emplace_back(state(n, KeyBasis(), 0), false);                 // large enough, and no basis
  // A basis before the store could fit one, with coordinates of the right size for its keys.
  states.emplace_back(state(n - 10, st.key_basis(), tiles_of(n - 10)), false);
  states.emplace_back(state(n, st.key_basis(), tiles - 1), false);     // coordinates short of the keys
  states.emplace_back(state(100, KeyBasis(), 0), true);                // not fitted yet
  for (auto& [w, ok] : states) {
    RecallStore s;
    StateReader rd(w.bytes().data(), w.bytes().size());
    if (ok) EXPECT_NO_THROW(s.io(rd));
    else EXPECT_THROW(s.io(rd), Error);
  }
  EXPECT_THROW(RecallStore(40, 16, KvType::F32, RecallScore::Lowrank), Error);  // d / 4 = 10: not groups of 4 of 16 lanes
  EXPECT_THROW(RecallStore(64, 8, KvType::F32, RecallScore::Lowrank), Error);   // pages of 8: not whole tiles of 16 keys
}

// Lowrank's stored coordinates are the basis' coordinates of each key as read back, rounded to
// int8 at a per-key fp16 scale of its largest magnitude / 127: within half a step of the float64
// projection. A key far outside fp16's range along the basis (past 127 x 65504) keeps finite
// coordinates, clamped at +-127 steps of the largest scale, and finite page scores.
TEST(RecallStore, LowrankCoordinatesAreTheBasisCoordinatesRounded) {
  const int d = 64, n = RecallStore::kFitKeysPerDim * d + 40, r = d / RecallStore::kLowrankDiv;
  std::mt19937 rng(11);
  RecallStore st(d, 16, KvType::F32, RecallScore::Lowrank);
  std::vector<float> v = randn(static_cast<size_t>(d), 1.0f, rng);
  for (int j = 0; j < n; ++j) {
    std::vector<float> k = randn(static_cast<size_t>(d), 1.0f, rng);
    for (int e = 0; e < 8; ++e) k[static_cast<size_t>(e)] *= 6.0f;  // a few channels of larger spread
    st.add(k.data(), v.data(), j);
  }
  const KeyBasis& B = st.key_basis();
  ASSERT_TRUE(B.fitted());
  std::vector<float> k(static_cast<size_t>(d)), vb(static_cast<size_t>(d)), c(static_cast<size_t>(r));
  const auto exact = [&](int j) {  // float64 coordinates of key j as read back
    st.load(j, k.data(), vb.data());
    std::vector<double> x(static_cast<size_t>(r), 0.0);
    for (int i = 0; i < r; ++i)
      for (int e = 0; e < d; ++e)
        x[static_cast<size_t>(i)] += static_cast<double>(B.key[static_cast<size_t>(i * d + e)]) * (static_cast<double>(k[static_cast<size_t>(e)]) - B.mean[static_cast<size_t>(e)]);
    return x;
  };
  for (int j = 0; j < n; j += 7) {
    const std::vector<double> x = exact(j);
    double amax = 0;
    for (double e : x) amax = std::max(amax, std::abs(e));
    const double step = fp16_to_fp32(fp32_to_fp16(static_cast<float>(amax / 127)));
    st.key_coords(j, c.data());
    for (int i = 0; i < r; ++i) EXPECT_NEAR(c[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 0.5 * step + 1e-4 * amax) << j << " " << i;
  }
  // A key of 1e9 along the basis' first direction, and a page of such keys.
  for (int j = 0; j < 16; ++j) {
    for (int e = 0; e < d; ++e) k[static_cast<size_t>(e)] = B.mean[static_cast<size_t>(e)] + 1e9f * B.query[static_cast<size_t>(e)];
    st.add(k.data(), v.data(), n + j);
  }
  st.key_coords(n + 3, c.data());
  for (float x : c) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(std::abs(c[0]), 127.0f * 65504.0f);
  std::vector<float> score(static_cast<size_t>(st.n_pages()));
  const float* qs[1] = {k.data()};
  st.page_scores(qs, 1, 0, st.n_pages(), score.data());
  for (float x : score) ASSERT_TRUE(std::isfinite(x));
}

TEST(RecallStore, RefusesWhatItCannotStore) {
  EXPECT_THROW(RecallStore(64, 0, KvType::Q8_0), Error);
  EXPECT_THROW(RecallStore(64, 16, KvType::KIVI4), Error);
  EXPECT_THROW(RecallStore(48, 16, KvType::Q4_0), Error);  // blocks of 32
  EXPECT_THROW(KvCache(1, 1, 64, 8, 4, KvType::F32, KvType::F32, RecallConfig{4, 16, KvType::Q8_0}), Error);  // centroids
}

// The `want` of the pages `among` a float64 reader would rank first by the per-row scores b[r][p]:
// each page's score relative to the row's best of them, the largest over the rows (ties to the later
// page); increasing order.
std::vector<int> rank64(const std::vector<std::vector<double>>& b, std::vector<int> among, int want) {
  std::vector<double> best(b.front().size(), -INFINITY);
  for (const std::vector<double>& br : b) {
    double top = -INFINITY;
    for (const int p : among) top = std::max(top, br[static_cast<size_t>(p)]);
    for (const int p : among) best[static_cast<size_t>(p)] = std::max(best[static_cast<size_t>(p)], br[static_cast<size_t>(p)] - top);
  }
  std::sort(among.begin(), among.end(), [&](int a, int c) {
    return best[static_cast<size_t>(a)] != best[static_cast<size_t>(c)] ? best[static_cast<size_t>(a)] > best[static_cast<size_t>(c)] : a > c;
  });
  among.resize(std::min(among.size(), static_cast<size_t>(want)));
  std::sort(among.begin(), among.end());
  return among;
}

// The pages a float64 reader of the store would choose: each page's score for each query row (the
// bound of the float64 min/max of its rows as read back, or the largest float64 q . k_j of them,
// a q8_0 store's keys against the query rounded to q8_0 blocks as the store scores them), ranked
// by rank64; Shortlist: the RecallStore::kShortlist * want pages of highest bound, ranked by
// their keys, the bound that of the page's q8_0 summary as read back for the query's
// [min(q, 0), max(q, 0)] rounded to q8_0 as read back; Lowrank the same with the largest score of
// the page's key coordinates as read back against the query's (float64 from the store's basis),
// rounded to int8 by its largest magnitude, or as Keys before the store fitted its basis.
std::vector<int> pages64(const RecallStore& st, const std::vector<const float*>& q, int d, int want, RecallScore how) {
  const int np = st.n_pages();
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
  std::vector<std::vector<double>> mn(static_cast<size_t>(np), std::vector<double>(d, INFINITY)),
      mx(static_cast<size_t>(np), std::vector<double>(d, -INFINITY));
  for (int j = 0; j < st.n(); ++j) {
    st.load(j, k.data(), v.data());
    for (int i = 0; i < d; ++i) {
      mn[static_cast<size_t>(j / st.page())][static_cast<size_t>(i)] = std::min<double>(mn[static_cast<size_t>(j / st.page())][static_cast<size_t>(i)], k[static_cast<size_t>(i)]);
      mx[static_cast<size_t>(j / st.page())][static_cast<size_t>(i)] = std::max<double>(mx[static_cast<size_t>(j / st.page())][static_cast<size_t>(i)], k[static_cast<size_t>(i)]);
    }
  }
  std::vector<std::vector<double>> bound, keys;
  for (const float* qr : q) {
    std::vector<double> b(static_cast<size_t>(np), 0.0), x(static_cast<size_t>(np), -INFINITY);
    if (how == RecallScore::Lowrank && st.key_basis().fitted()) {
      const KeyBasis& B = st.key_basis();
      std::vector<float> qc(static_cast<size_t>(B.r)), kc(qc.size());
      float amax = 0.0f;
      for (int i = 0; i < B.r; ++i) {
        qc[static_cast<size_t>(i)] = static_cast<float>(test::dot64(B.query.data() + static_cast<size_t>(i) * d, qr, d));
        amax = std::max(amax, std::abs(qc[static_cast<size_t>(i)]));
      }
      const float s = amax / 127.0f;
      for (float& x : qc) x = s * std::nearbyint(x / s);
      std::fill(b.begin(), b.end(), -INFINITY);
      for (int j = 0; j < st.n(); ++j) {
        st.key_coords(j, kc.data());
        b[static_cast<size_t>(j / st.page())] = std::max(b[static_cast<size_t>(j / st.page())], test::dot64(qc.data(), kc.data(), B.r));
      }
    } else if (how == RecallScore::Shortlist) {
      std::vector<float> split(static_cast<size_t>(2 * d)), mm(split.size());
      for (int i = 0; i < d; ++i) {
        split[static_cast<size_t>(i)] = std::min(qr[i], 0.0f);
        split[static_cast<size_t>(d + i)] = std::max(qr[i], 0.0f);
      }
      std::vector<uint8_t> qa(act_row_bytes(ActFormat::Q8_0, 2 * d));
      quantize_act_row(ActFormat::Q8_0, split.data(), qa.data(), 2 * d);
      dequantize_act_row(ActFormat::Q8_0, qa.data(), split.data(), 2 * d);
      for (int p = 0; p < np; ++p) {
        st.page_sketch(p, mm.data());
        b[static_cast<size_t>(p)] = test::dot64(split.data(), mm.data(), 2 * d);
      }
    } else {
      for (int p = 0; p < np; ++p)
        for (int i = 0; i < d; ++i)
          b[static_cast<size_t>(p)] += std::max(qr[i] * mn[static_cast<size_t>(p)][static_cast<size_t>(i)], qr[i] * mx[static_cast<size_t>(p)][static_cast<size_t>(i)]);
    }
    // A q8_0 store's keys meet the query rounded to q8_0 blocks (RecallStore::key_scores).
    std::vector<float> qk(qr, qr + d);
    if (st.type() == KvType::Q8_0) {
      std::vector<uint8_t> qa(act_row_bytes(ActFormat::Q8_0, d));
      quantize_act_row(ActFormat::Q8_0, qr, qa.data(), d);
      dequantize_act_row(ActFormat::Q8_0, qa.data(), qk.data(), d);
    }
    for (int j = 0; j < st.n(); ++j) {
      st.load(j, k.data(), v.data());
      x[static_cast<size_t>(j / st.page())] = std::max(x[static_cast<size_t>(j / st.page())], test::dot64(qk.data(), k.data(), d));
    }
    bound.push_back(b);
    keys.push_back(x);
  }
  std::vector<int> all(static_cast<size_t>(np));
  std::iota(all.begin(), all.end(), 0);
  if (how == RecallScore::Quest) return rank64(bound, all, want);
  if (how == RecallScore::Keys || (how == RecallScore::Lowrank && !st.key_basis().fitted())) return rank64(keys, all, want);
  return rank64(keys, rank64(bound, all, RecallStore::kShortlist * want), want);
}

struct Case {
  int n_heads, n_kv, d, n_keys, kept, pages, page;
  KvType store;
  bool taylor;
  RecallScore score;
  float softcap = 0.0f;  // Gemma 2's logit soft-cap (0: none)
};

// A cache of one layer that held n_keys tokens, of which each head kept `kept` (its own random
// choice, the newest 16 always) and sent the rest to its store (and its Taylor state).
KvCache evicted_cache(const Case& c, std::mt19937& rng, std::shared_ptr<const std::string> file_dir = nullptr, int every = 1) {
  KvCache cache(1, c.n_kv, c.d, c.n_keys, 0, KvType::F32, KvType::F32, RecallConfig{c.pages, c.page, c.store, c.score, file_dir, every});
  for (int j = 0; j < c.n_keys; ++j) {
    const std::vector<float> k = randn(static_cast<size_t>(c.n_kv * c.d), 1.5f, rng), v = randn(k.size(), 1.0f, rng);
    cache.append(0, k.data(), v.data(), j);
  }
  for (int h = 0; h < c.n_kv; ++h) {
    std::vector<int> order(static_cast<size_t>(c.n_keys - 16));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<char> keep(static_cast<size_t>(c.n_keys), 0);
    for (int j = c.n_keys - 16; j < c.n_keys; ++j) keep[static_cast<size_t>(j)] = 1;
    for (int i = 0; i < c.kept - 16; ++i) keep[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
    cache.compact(0, h, keep, c.taylor, true);
  }
  return cache;
}

// The rows attended exactly: kh's exact cache and the chosen pages' (as the store reads them back),
// in one f32 cache for the references; the other stored rows are the Taylor state's.
struct AttendedRows {
  KvCache both;
  std::vector<std::vector<float>> k_rest, v_rest;
};
AttendedRows attended_rows(const KvHead& kh, const std::vector<int>& chosen, int d, int n_keys) {
  AttendedRows a{KvCache(1, 1, d, n_keys), {}, {}};
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
  for (int j = 0; j < kh.n; ++j) a.both.append(0, kh.key(j, d), kh.value(j, d), kh.pos[static_cast<size_t>(j)]);
  for (int j = 0; j < kh.recall.n(); ++j) {
    kh.recall.load(j, k.data(), v.data());
    if (std::binary_search(chosen.begin(), chosen.end(), j / kh.recall.page())) {
      a.both.append(0, k.data(), v.data(), kh.recall.pos(j));
    } else {
      a.k_rest.push_back(k);
      a.v_rest.push_back(v);
    }
  }
  return a;
}

// Exact cache plus recalled pages, against float64 over those rows (and the Taylor formula over
// the rest of the evicted tokens), through attention_prefill and attention_decode; short and long
// exact caches (the latter split over their keys); a lossy and a lossless store.
TEST(Recall, AttentionEqualsFloat64OverTheExactRowsAndTheRecalledPages) {
  using S = RecallScore;
  for (const Case c : {Case{6, 2, 64, 300, 64, 5, 8, KvType::Q8_0, false, S::Keys}, Case{6, 2, 64, 300, 64, 5, 8, KvType::Q8_0, false, S::Quest},
                       Case{6, 2, 64, 300, 64, 5, 8, KvType::F32, true, S::Keys}, Case{6, 2, 64, 300, 64, 5, 8, KvType::F32, true, S::Quest},
                       Case{8, 1, 32, 3000, 2200, 12, 16, KvType::Q4_0, false, S::Keys}, Case{9, 3, 64, 2600, 1100, 7, 16, KvType::F32, true, S::Quest},
                       Case{6, 2, 64, 300, 64, 5, 8, KvType::Q4_0, true, S::Keys},  // the Taylor state of a lossy store's rows
                       // Stores of over 64 pages are scored in parallel chunks before attention.
                       Case{6, 2, 64, 3000, 200, 10, 8, KvType::Q8_0, true, S::Keys}, Case{4, 1, 64, 1500, 100, 9, 16, KvType::F16, false, S::Quest},
                       Case{4, 2, 32, 200, 40, 1000, 4, KvType::F32, true, S::Keys},  // every page recalled: nothing left to the Taylor state
                       // Soft-capped logits: recalled rows capped, the Taylor state of the rest by the chain rule.
                       Case{6, 2, 64, 300, 64, 5, 8, KvType::F32, true, S::Keys, 1.5f},
                       Case{9, 3, 64, 2600, 1100, 7, 16, KvType::F32, true, S::Quest, 1.5f},
                       Case{6, 2, 64, 300, 64, 5, 8, KvType::Q8_0, false, S::Quest, 1.5f},
                       // The bound's shortlist re-ranked by the keys: a short store scored in the
                       // head's item, a long one in parallel chunks, a shortlist of every page.
                       Case{6, 2, 64, 400, 64, 5, 8, KvType::Q8_0, false, S::Shortlist}, Case{6, 2, 64, 3000, 200, 10, 8, KvType::F32, true, S::Shortlist},
                       Case{4, 1, 64, 1500, 100, 9, 16, KvType::Q4_0, false, S::Shortlist}, Case{4, 2, 32, 300, 40, 20, 8, KvType::F16, true, S::Shortlist},
                       // Low-rank coordinates' shortlist: a store that fitted its basis (scored in
                       // parallel chunks, or in the head's item), one too small to (ranked as Keys),
                       // a shortlist of every page.
                       Case{6, 2, 64, 3000, 200, 10, 16, KvType::Q8_0, false, S::Lowrank}, Case{4, 1, 64, 3000, 100, 4, 32, KvType::F32, true, S::Lowrank},
                       Case{6, 2, 64, 400, 64, 5, 16, KvType::F32, false, S::Lowrank}, Case{4, 2, 32, 1000, 40, 20, 16, KvType::F16, true, S::Lowrank}}) {
    std::mt19937 rng(11 + c.n_keys + c.pages);
    const KvCache cache = evicted_cache(c, rng);
    const int group = c.n_heads / c.n_kv;
    const int32_t qpos = c.n_keys;
    const std::vector<float> q = randn(static_cast<size_t>(c.n_heads * c.d), 1.0f, rng);
    const AttentionShape shape{c.n_heads, c.n_kv, c.d, 0, c.softcap};
    ThreadPool pool(2);
    std::vector<float> pre(q.size()), dec(q.size());
    attention_prefill(pre.data(), q.data(), &qpos, 1, cache, 0, shape, pool);
    std::vector<DecodeRowScores> xs(static_cast<size_t>(c.n_kv));
    for (int g = 0; g < c.n_kv; ++g) xs[static_cast<size_t>(g)].compute(q.data() + static_cast<size_t>(g * group) * c.d, group, qpos, cache.head(0, g), c.d, c.softcap);
    attention_decode(dec.data(), q.data(), qpos, cache, 0, shape, xs, pool);
    for (int g = 0; g < c.n_kv; ++g) {
      const KvHead& kh = cache.head(0, g);
      ASSERT_EQ(kh.recall.n(), c.n_keys - c.kept);
      std::vector<const float*> rows;
      for (int r = 0; r < group; ++r) rows.push_back(q.data() + static_cast<size_t>(g * group + r) * c.d);
      const std::vector<int> chosen = pages64(kh.recall, rows, c.d, c.pages, c.score);
      std::vector<int> got;
      kh.recall.select(rows.data(), group, c.pages, &got);
      ASSERT_EQ(got, chosen) << "head " << g << " " << recall_score_name(c.score);
      const AttendedRows a = attended_rows(kh, chosen, c.d, c.n_keys);
      const KvCache& both = a.both;
      const auto &k_rest = a.k_rest, &v_rest = a.v_rest;
      for (int r = 0; r < group; ++r) {
        const std::vector<double> want = c.taylor ? test::taylor_attention(rows[static_cast<size_t>(r)], qpos, both.head(0, 0), k_rest, v_rest, c.d, c.softcap)
                                                  : test::softmax_attention(rows[static_cast<size_t>(r)], qpos, both.head(0, 0), c.d, 0, c.softcap);
        const size_t off = static_cast<size_t>(g * group + r) * c.d;
        for (int i = 0; i < c.d; ++i) {
          const double tol = (c.taylor ? 2e-4 : 2e-5) * (1 + std::abs(want[static_cast<size_t>(i)]));
          ASSERT_NEAR(pre[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], tol) << "keys " << c.n_keys << " head " << g * group + r << " dim " << i;
          ASSERT_NEAR(dec[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], tol) << "keys " << c.n_keys << " head " << g * group + r << " dim " << i;
        }
      }
    }
  }
}

// --kv-recall-every 3: a decode step that chooses a head's pages holds the choice, and the next two
// decode steps attend those pages, with the pages written since (the one then last and any new),
// while each of their rows' queries stays within RecallStore::kHoldCos of the choosing one's
// direction; the fourth chooses again, as does a step whose query turned away. A call that is not
// a decode step chooses for itself and drops the choice held. Each step's output against float64 over the exact rows and the
// pages it should have attended, through attention_decode and attention_prefill's decode step; a
// short exact cache and a long one (split over its keys).
TEST(Recall, DecodeStepsAttendTheHeldChoiceUntilItExpires) {
  using S = RecallScore;
  for (const Case c : {Case{6, 2, 64, 3000, 200, 10, 16, KvType::Q8_0, false, S::Lowrank}, Case{8, 1, 32, 3000, 2200, 12, 16, KvType::Q4_0, false, S::Keys},
                       Case{6, 2, 64, 400, 64, 5, 8, KvType::F32, false, S::Quest}}) {
    for (const bool scored : {true, false}) {
      std::mt19937 rng(5 + c.n_keys);
      KvCache cache = evicted_cache(c, rng, nullptr, 3);
      const int group = c.n_heads / c.n_kv, added = 40;
      const int32_t qpos = c.n_keys + added;
      const AttentionShape shape{c.n_heads, c.n_kv, c.d, 0, c.softcap};
      ThreadPool pool(2);
      // Queries 0 and 2 at random, 1 and 3 near them (cosine about 0.99) but choosing other pages.
      std::vector<std::vector<float>> qs;
      for (int i = 0; i < 4; ++i) {
        qs.push_back(randn(static_cast<size_t>(c.n_heads * c.d), i % 2 ? 0.15f : 1.0f, rng));
        if (i % 2)
          for (size_t e = 0; e < qs.back().size(); ++e) qs.back()[e] += qs[static_cast<size_t>(i - 1)][e];
      }
      const auto rows_of = [&](const std::vector<float>& q, int g) {
        std::vector<const float*> rows;
        for (int r = 0; r < group; ++r) rows.push_back(q.data() + static_cast<size_t>(g * group + r) * c.d);
        return rows;
      };
      // The pages float64 chooses for query qs[qi], per KV head, in the store as it is now.
      const auto choice = [&](int qi) {
        std::vector<std::vector<int>> pages;
        for (int g = 0; g < c.n_kv; ++g) pages.push_back(pages64(cache.head(0, g).recall, rows_of(qs[static_cast<size_t>(qi)], g), c.d, c.pages, c.score));
        return pages;
      };
      // One call with query qs[qi]: a decode step (through attention_decode or attention_prefill's
      // decode step) or not; its output must be float64 attention over the exact rows and `pages`.
      const auto step = [&](int qi, bool decode, const std::vector<std::vector<int>>& pages, const char* what) {
        const std::vector<float>& q = qs[static_cast<size_t>(qi)];
        std::vector<float> out(q.size());
        if (decode && scored) {
          std::vector<DecodeRowScores> xs(static_cast<size_t>(c.n_kv));
          for (int g = 0; g < c.n_kv; ++g) xs[static_cast<size_t>(g)].compute(q.data() + static_cast<size_t>(g * group) * c.d, group, qpos, cache.head(0, g), c.d, c.softcap);
          attention_decode(out.data(), q.data(), qpos, cache, 0, shape, xs, pool);
        } else {
          attention_prefill(out.data(), q.data(), &qpos, 1, cache, 0, shape, pool, decode);
        }
        for (int g = 0; g < c.n_kv; ++g) {
          const AttendedRows a = attended_rows(cache.head(0, g), pages[static_cast<size_t>(g)], c.d, qpos);
          const std::vector<const float*> rows = rows_of(q, g);
          for (int r = 0; r < group; ++r) {
            const std::vector<double> ref = test::softmax_attention(rows[static_cast<size_t>(r)], qpos, a.both.head(0, 0), c.d, 0, c.softcap);
            const size_t off = static_cast<size_t>(g * group + r) * c.d;
            for (int i = 0; i < c.d; ++i)
              ASSERT_NEAR(out[off + static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 2e-5 * (1 + std::abs(ref[static_cast<size_t>(i)])))
                  << what << ": " << recall_score_name(c.score) << " keys " << c.n_keys << " head " << g * group + r << " dim " << i;
          }
        }
      };
      // A held choice as attended: with each head's pages from `from` (per head) on.
      const auto held = [&](std::vector<std::vector<int>> pages, const std::vector<int>& from) {
        for (int g = 0; g < c.n_kv; ++g) {
          std::vector<int>& p = pages[static_cast<size_t>(g)];
          for (int i = from[static_cast<size_t>(g)]; i < cache.head(0, g).recall.n_pages(); ++i) p.push_back(i);
          std::sort(p.begin(), p.end());
          p.erase(std::unique(p.begin(), p.end()), p.end());
        }
        return pages;
      };
      const auto last_pages = [&] {
        std::vector<int> last;
        for (int g = 0; g < c.n_kv; ++g) last.push_back(cache.head(0, g).recall.n_pages() - 1);
        return last;
      };
      const std::vector<std::vector<int>> first = choice(0);
      const std::vector<int> last_then = last_pages();
      // The queries choose different pages, so that a held choice shows.
      ASSERT_NE(held(first, last_then), held(choice(1), last_then));
      step(0, true, first, "the first step chooses");
      step(1, true, held(first, last_then), "the second attends the first's pages");
      // Decode evicts: 24 of `added` new tokens of each head go to its store, filling its last page
      // and writing new ones; the third step attends them with the held choice.
      for (int j = 0; j < added; ++j) {
        const std::vector<float> k = randn(static_cast<size_t>(c.n_kv * c.d), 1.5f, rng), v = randn(k.size(), 1.0f, rng);
        cache.append(0, k.data(), v.data(), c.n_keys + j);
      }
      for (int g = 0; g < c.n_kv; ++g) {
        std::vector<char> keep(static_cast<size_t>(cache.head(0, g).n), 1);
        for (int j = 0; j < 24; ++j) keep[keep.size() - added + static_cast<size_t>(j)] = 0;
        cache.compact(0, g, keep, false, true);
        ASSERT_GT(cache.head(0, g).recall.n_pages() - 1, last_then[static_cast<size_t>(g)]);
      }
      step(1, true, held(first, last_then), "the third attends them and the pages written since");
      const std::vector<std::vector<int>> fourth = choice(1);
      step(1, true, fourth, "the fourth chooses again");
      step(2, true, choice(2), "the fifth's query turned away: it chooses");
      const std::vector<int> last_now = last_pages();
      ASSERT_NE(choice(3), held(choice(2), last_now));
      step(3, true, held(choice(2), last_now), "the sixth's is near: it holds the fifth's");
      step(0, false, choice(0), "a call that is not a decode step chooses for itself");
      // The fifth's own query again: held, it would attend the last page as well.
      ASSERT_NE(choice(2), held(choice(2), last_now));
      step(2, true, choice(2), "and the next decode step chooses afresh");
    }
  }
}

// The rows of a prompt chunk after the first (a call of more than one token): each KV head's pages
// for the tokens before the call's last 32 are chosen once, by the rows of those 32 tokens, and each
// of the 32 chooses its own by its own rows, as a float64 reader would choose them; every row
// attends to the exact cache plus its token's pages, with the Taylor state of the rest, as float64
// attention over those rows (the pages' rows attended by the tiled kernel where no Taylor state
// covers, soft-capped or not).
TEST(Recall, ChunkRowsAttendThePagesTheirLastTokensChose) {
  using S = RecallScore;
  constexpr int kTokens = 40, kChooser = 32;  // kv_recall.h's kChunkRecallTokens
  for (const Case c : {Case{6, 2, 64, 300, 64, 5, 8, KvType::Q8_0, false, S::Keys}, Case{9, 3, 64, 2600, 1100, 7, 16, KvType::F32, true, S::Quest},
                       Case{6, 2, 64, 3000, 200, 10, 8, KvType::F32, true, S::Keys, 1.5f}, Case{6, 2, 64, 3000, 200, 10, 8, KvType::Q8_0, false, S::Shortlist},
                       Case{6, 2, 64, 3000, 200, 10, 8, KvType::Q8_0, false, S::Keys, 1.5f}, Case{6, 2, 64, 3000, 200, 10, 16, KvType::Q8_0, false, S::Lowrank}}) {
    std::mt19937 rng(23 + c.n_keys);
    const KvCache cache = evicted_cache(c, rng);
    const int group = c.n_heads / c.n_kv;
    std::vector<int32_t> qpos(kTokens);
    std::iota(qpos.begin(), qpos.end(), c.n_keys);
    const std::vector<float> q = randn(static_cast<size_t>(kTokens * c.n_heads * c.d), 1.0f, rng);
    const AttentionShape shape{c.n_heads, c.n_kv, c.d, 0, c.softcap};
    ThreadPool pool(2);
    std::vector<float> out(q.size());
    attention_prefill(out.data(), q.data(), qpos.data(), kTokens, cache, 0, shape, pool);
    auto row = [&](int t, int h) { return q.data() + (static_cast<size_t>(t) * c.n_heads + h) * c.d; };
    for (int g = 0; g < c.n_kv; ++g) {
      const KvHead& kh = cache.head(0, g);
      // Tokens t0..t1-1 choose together (the last 32 for those before them) or one alone.
      auto chosen_by = [&](int t0, int t1) {
        std::vector<const float*> choosers;
        for (int t = t0; t < t1; ++t)
          for (int r = 0; r < group; ++r) choosers.push_back(row(t, g * group + r));
        return pages64(kh.recall, choosers, c.d, c.pages, c.score);
      };
      const std::vector<int> for_the_rest = chosen_by(kTokens - kChooser, kTokens);
      int own_differs = 0;  // tokens whose own pages are not the call's (so the rule shows)
      for (int t = kTokens - kChooser; t < kTokens; ++t) own_differs += chosen_by(t, t + 1) != for_the_rest;
      EXPECT_GT(own_differs, 0) << "keys " << c.n_keys << " head " << g;
      for (int t = 0; t < kTokens; ++t) {
        const std::vector<int> chosen = t < kTokens - kChooser ? for_the_rest : chosen_by(t, t + 1);
        ASSERT_LT(static_cast<int>(chosen.size()), kh.recall.n_pages());  // a choice, not every page
        const AttendedRows a = attended_rows(kh, chosen, c.d, c.n_keys);
        const KvCache& both = a.both;
        const auto &k_rest = a.k_rest, &v_rest = a.v_rest;
        for (int r = 0; r < group; ++r) {
          const float* qr = row(t, g * group + r);
          const std::vector<double> want = c.taylor ? test::taylor_attention(qr, qpos[static_cast<size_t>(t)], both.head(0, 0), k_rest, v_rest, c.d, c.softcap)
                                                    : test::softmax_attention(qr, qpos[static_cast<size_t>(t)], both.head(0, 0), c.d, 0, c.softcap);
          const size_t off = (static_cast<size_t>(t) * c.n_heads + g * group + r) * c.d;
          for (int i = 0; i < c.d; ++i)
            ASSERT_NEAR(out[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], (c.taylor ? 2e-4 : 2e-5) * (1 + std::abs(want[static_cast<size_t>(i)])))
                << "keys " << c.n_keys << " token " << t << " head " << g * group + r << " dim " << i;
        }
      }
    }
  }
}

TEST(Recall, StoreBytesCountInTheCache) {
  std::mt19937 rng(2);
  const Case c{4, 2, 64, 100, 40, 2, 16, KvType::Q8_0, false, RecallScore::Quest};
  const KvCache cache = evicted_cache(c, rng);
  // 60 evicted tokens a head: 4 pages; rows of 68 bytes (two q8_0 blocks) for keys and values, a
  // position, and 2 x 64 floats of summary a page.
  const size_t per_head = 60 * (2 * 68 + 4) + 4 * 2 * 64 * 4;
  EXPECT_EQ(cache.store_bytes_used(), 2 * per_head);
  EXPECT_EQ(cache.bytes_used(), 2 * per_head + static_cast<size_t>(2 * 40) * KvCache::token_bytes(64, KvType::F32, KvType::F32));
  EXPECT_EQ(RecallStore::planned_bytes(64, 16, KvType::Q8_0, 60, RecallScore::Quest), per_head);
  // Ranked by their keys, pages keep no summary.
  EXPECT_EQ(RecallStore::planned_bytes(64, 16, KvType::Q8_0, 60, RecallScore::Keys), size_t{60} * (2 * 68 + 4));
  const KvCache keys = evicted_cache(Case{4, 2, 64, 100, 40, 2, 16, KvType::Q4_0, false, RecallScore::Keys}, rng);
  EXPECT_EQ(keys.store_bytes_used(), size_t{2} * 60 * (2 * 36 + 4));
  // Lowrank: nothing more until the store fits its basis (1024 keys of 64); then the basis (mean,
  // and 16 rows of 64 for keys and for queries, in floats) and per 16 keys 16 fp16 scales and
  // 16 x 16 coordinate bytes.
  EXPECT_EQ(RecallStore::planned_bytes(64, 16, KvType::Q8_0, 1023, RecallScore::Lowrank), size_t{1023} * (2 * 68 + 4));
  EXPECT_EQ(RecallStore::planned_bytes(64, 16, KvType::Q8_0, 1030, RecallScore::Lowrank),
            size_t{1030} * (2 * 68 + 4) + (64 + 2 * 16 * 64) * 4 + 65 * (32 + 256));
  const KvCache low = evicted_cache(Case{4, 2, 64, 1200, 100, 2, 16, KvType::Q8_0, false, RecallScore::Lowrank}, rng);
  ASSERT_TRUE(low.head(0, 0).recall.key_basis().fitted());
  // 1100 evicted tokens a head: the rows, the basis, and 69 tiles of coordinates (counted here, not
  // by planned_bytes, which bytes() is).
  EXPECT_EQ(low.store_bytes_used(), 2 * (size_t{1100} * (2 * 68 + 4) + (64 + 2 * 16 * 64) * 4 + 69 * (32 + 256)));
}

// Resident bytes of file pages mapped by this process (RssFile + RssShmem of /proc/self/status).
size_t resident_file_bytes() {
  std::ifstream f("/proc/self/status");
  size_t kib = 0;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("RssFile:", 0) == 0 || line.rfind("RssShmem:", 0) == 0) kib += std::stoul(line.substr(line.find(':') + 1));
  return kib * 1024;
}

// --kv-store-file: a store in mapped files of a directory attends exactly as one on the heap (the
// same rows, pages and outputs), gives its pages back once written and read (the mapped rows do
// not stay resident), and a state file read into such a cache puts the rows back in files.
TEST(Recall, StoreInMappedFilesAttendsAsOnTheHeapAndStaysOutOfMemory) {
  char tmpl[] = "/tmp/slake-store-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const auto dir = std::make_shared<const std::string>(tmpl);
  for (const RecallScore score : {RecallScore::Keys, RecallScore::Quest, RecallScore::Shortlist, RecallScore::Lowrank}) {
    // 24000 evicted tokens of 68-byte q8_0 rows: 1.6 MB of keys and of values, past kStoreFileMinBytes.
    const Case c{2, 1, 64, 24500, 500, 16, 16, KvType::Q8_0, false, score};
    std::mt19937 rng_heap(5), rng_file(5), rng(9);
    const std::vector<float> q = randn(static_cast<size_t>(c.n_heads * c.d), 1.0f, rng);
    const int32_t qpos = c.n_keys;
    const AttentionShape shape{c.n_heads, c.n_kv, c.d, 0};
    ThreadPool pool(2);
    std::vector<float> out_heap(q.size()), out_file(q.size());
    const KvCache heap = evicted_cache(c, rng_heap);
    attention_prefill(out_heap.data(), q.data(), &qpos, 1, heap, 0, shape, pool);
    const size_t before = resident_file_bytes();  // after the same code ran on the heap store
    const KvCache file = evicted_cache(c, rng_file, dir);
    attention_prefill(out_file.data(), q.data(), &qpos, 1, file, 0, shape, pool);
    // The pages read go back every kReleaseEvery reads (a read faults in its neighbours too).
    std::vector<float> again(q.size());
    for (int i = 1; i < RecallStore::kReleaseEvery; ++i) attention_prefill(again.data(), q.data(), &qpos, 1, file, 0, shape, pool);
    const size_t kept = resident_file_bytes() - std::min(before, resident_file_bytes());
    const KvHead& a = heap.head(0, 0);
    const KvHead& b = file.head(0, 0);
    ASSERT_FALSE(a.recall.file_backed());
    ASSERT_TRUE(b.recall.file_backed());
    ASSERT_EQ(a.recall.n(), b.recall.n());
    ASSERT_EQ(heap.store_bytes_used(), file.store_bytes_used());
    EXPECT_EQ(out_heap, out_file) << recall_score_name(score);
    // Written and read, the mapped rows went back to the page cache: of the 3.3 MB the store
    // holds, under 0.5 MB stays resident (the shortlist's keys are read back like the values), and
    // 2 MB when pages are ranked by their keys (1.6 MB, read by every query).
    EXPECT_LT(kept, score != RecallScore::Keys ? 512u << 10 : 2u << 20) << recall_score_name(score) << ": " << kept << " bytes";
    // ... and they were in files: ranked by their keys, the keys every query reads are file pages.
    if (score == RecallScore::Keys) {
      EXPECT_GT(kept, 1u << 20) << kept;
    }
    // A copy (a saved state) is made in files of its own and given back whole.
    const size_t before_copy = resident_file_bytes();
    const KvCache copy = file;
    ASSERT_TRUE(copy.head(0, 0).recall.file_backed());
    EXPECT_LT(resident_file_bytes() - std::min(before_copy, resident_file_bytes()), 256u << 10);
    // A state file read into a cache that keeps its store in files: the rows go back to files.
    StateWriter w;
    const_cast<KvCache&>(file).io(w);
    KvCache back(1, c.n_kv, c.d, c.n_keys, 0, KvType::F32, KvType::F32, RecallConfig{c.pages, c.page, c.store, c.score, dir});
    StateReader r(w.bytes().data(), w.bytes().size());
    back.io(r);
    ASSERT_TRUE(back.head(0, 0).recall.file_backed());
    std::vector<float> k1(64), v1(64), k2(64), v2(64);
    for (int j = 0; j < a.recall.n(); j += 997) {
      a.recall.load(j, k1.data(), v1.data());
      back.head(0, 0).recall.load(j, k2.data(), v2.data());
      ASSERT_EQ(k1, k2);
      ASSERT_EQ(v1, v2);
    }
  }
  // A directory that cannot hold files is a clear error.
  std::mt19937 rng(1);
  EXPECT_THROW(evicted_cache(Case{2, 1, 64, 24500, 500, 16, 16, KvType::Q8_0, false, RecallScore::Keys}, rng,
                             std::make_shared<const std::string>("/nonexistent-dir")),
               Error);
  rmdir(tmpl);
}

}  // namespace
}  // namespace slake
