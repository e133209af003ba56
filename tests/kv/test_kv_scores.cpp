// The scoring pieces of the policies (src/kv/kv_scores.cpp, kv_vabs.cpp) against float64 brute
// force written from the formulas of algorithm.md: the window statistics (the indicator and CAKE's
// layer statistics), pooling, the decode score, H2O's accumulated attention, VABS (SLAKE eq.
// 15-18) and top-k selection.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "reference_math.h"
#include "slake/error.h"
#include "slake/kv/kv_scores.h"

namespace slake {
namespace {

struct RandomLayer {
  // Rows at positions 0, pos_step, 2 pos_step, ...
  RandomLayer(int H, int Hkv, int d, int S, unsigned seed, float key_scale = 2.0f, int pos_step = 1, KvType type = KvType::F32)
      : cache(1, Hkv, d, S, 0, type, type), shape{H, Hkv, d, 0} {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(Hkv * d)), v(static_cast<size_t>(Hkv * d));
    for (int j = 0; j < S; ++j) {
      for (auto& x : k) x = key_scale * nd(rng);
      for (auto& x : v) x = nd(rng);
      cache.append(0, k.data(), v.data(), j * pos_step);
    }
    q.resize(static_cast<size_t>(S) * H * d);
    for (auto& x : q) x = nd(rng);
  }
  // Float64 softmax row of query-head h of the query stored at row `i` of q, at position qpos
  // (rows at consecutive positions).
  std::vector<double> probs(int i, int h, int qpos) const { return probs_over_rows(i, h, qpos + 1); }
  // The same over rows 0 .. n_rows - 1.
  std::vector<double> probs_over_rows(int i, int h, int n_rows) const {
    const int d = shape.head_dim, G = shape.n_heads / shape.n_kv_heads;
    return test::attention_probs64(&q[(static_cast<size_t>(i) * shape.n_heads + h) * d], cache.head(0, h / G), d, n_rows, shape.softcap);
  }
  KvCache cache;
  AttentionShape shape;
  std::vector<float> q;  // [S][H][d]
};

TEST(PoolTokens, AverageOfFiveAndMaximumOfSeven) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int n : {1, 2, 3, 6, 17}) {
    std::vector<double> in(static_cast<size_t>(n)), avg(static_cast<size_t>(n)), mx(static_cast<size_t>(n));
    for (auto& x : in) x = u(rng);
    pool_tokens(in.data(), n, TokenPool::Avg5, avg.data());
    pool_tokens(in.data(), n, TokenPool::Max7, mx.data());
    for (int j = 0; j < n; ++j) {
      double s = 0, m = -1;
      for (int k = j - 3; k <= j + 3; ++k) {
        const double v = k >= 0 && k < n ? in[static_cast<size_t>(k)] : 0.0;  // zero padding
        if (std::abs(k - j) <= 2) s += v;
        if (k >= 0 && k < n) m = std::max(m, v);  // max-pool pads with -inf
      }
      EXPECT_DOUBLE_EQ(avg[static_cast<size_t>(j)], s / 5.0) << n << " " << j;
      EXPECT_DOUBLE_EQ(mx[static_cast<size_t>(j)], m) << n << " " << j;
    }
  }
}

// The decode score of algorithm.md §5.3: each group head's softmax over all rows (float64 here),
// pooled along the candidates with zero padding (Avg5) or over the candidates (Max7), mean over the
// group. Groups of 1, 8 and 20 (more than one lane block) and key scales that make peaked rows.
TEST(DecodeScores, MatchTheFormulaInFloat64) {
  for (int G : {1, 8, 20})
    for (float key_scale : {1.0f, 4.0f}) {
      const int d = 16, S = 70, n_cand = 50, qpos = S - 1;
      RandomLayer r(G, 1, d, S, 5 + G, key_scale);
      DecodeRowScores xs;
      xs.compute(r.q.data(), G, qpos, r.cache.head(0, 0), d, 0.0f);
      for (TokenPool pool : {TokenPool::Avg5, TokenPool::Max7}) {
        std::vector<double> got(n_cand);
        decode_scores(xs, n_cand, pool, got.data());
        std::vector<double> want(n_cand, 0.0);
        for (int h = 0; h < G; ++h) {
          const std::vector<double> p = r.probs(0, h, qpos);
          for (int j = 0; j < n_cand; ++j) {
            double acc = pool == TokenPool::Avg5 ? 0.0 : -1.0;
            for (int k = j - (pool == TokenPool::Avg5 ? 2 : 3); k <= j + (pool == TokenPool::Avg5 ? 2 : 3); ++k) {
              if (k < 0 || k >= n_cand) continue;
              acc = pool == TokenPool::Avg5 ? acc + p[static_cast<size_t>(k)] : std::max(acc, p[static_cast<size_t>(k)]);
            }
            want[static_cast<size_t>(j)] += (pool == TokenPool::Avg5 ? acc / 5.0 : acc) / G;
          }
        }
        for (int j = 0; j < n_cand; ++j)
          ASSERT_NEAR(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)], 1e-6 * want[static_cast<size_t>(j)] + 1e-12)
              << "group " << G << " key scale " << key_scale << " candidate " << j;
      }
    }
}

TEST(TopKFlags, KeepsTheBestAndBreaksTiesByIndex) {
  const std::vector<float> s{0.5f, 2.0f, 0.5f, 1.0f, 0.5f};
  EXPECT_EQ(top_k_flags(s.data(), 5, 3), (std::vector<char>{1, 1, 0, 1, 0}));
  EXPECT_EQ(top_k_flags(s.data(), 5, 0), (std::vector<char>(5, 0)));
  EXPECT_EQ(top_k_flags(s.data(), 5, 9), (std::vector<char>(5, 1)));
}

TEST(AccumulateAttention, SumsSoftmaxRowsOverQueriesAndGroups) {
  for (float cap : {0.0f, 1.0f}) {  // and with soft-capped logits (Gemma 2)
  const int H = 4, Hkv = 2, d = 8, S = 30, G = H / Hkv;
  RandomLayer r(H, Hkv, d, S, 11);
  r.shape.softcap = cap;
  ThreadPool pool(2);
  std::vector<int32_t> pos(S);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<std::vector<double>> acc;  // in two chunks, as prefill does
  accumulate_attention(r.q.data(), pos.data(), 12, r.cache, 0, r.shape, acc, pool);
  accumulate_attention(r.q.data() + 12 * H * d, pos.data() + 12, S - 12, r.cache, 0, r.shape, acc, pool);
  for (int g = 0; g < Hkv; ++g) {
    std::vector<double> want(S, 0.0);
    for (int i = 0; i < S; ++i)
      for (int h = g * G; h < (g + 1) * G; ++h) {
        const std::vector<double> p = r.probs(i, h, i);
        for (int j = 0; j <= i; ++j) want[static_cast<size_t>(j)] += p[static_cast<size_t>(j)] / G;
      }
    ASSERT_EQ(acc[static_cast<size_t>(g)].size(), static_cast<size_t>(S));
    for (int j = 0; j < S; ++j) EXPECT_NEAR(acc[static_cast<size_t>(g)][static_cast<size_t>(j)], want[static_cast<size_t>(j)], 1e-5) << "cap " << cap;
  }
  }
}

// Decode steps after the prompt, over rows whose positions have gaps (as after eviction), with a
// group of 3 (a partial part of lanes on every target) and f16 keys: the sums still follow the
// float64 softmax over the keys each query sees.
TEST(AccumulateAttention, DecodeStepsOverRowsWithGapsAndF16Keys) {
  const int H = 6, Hkv = 2, d = 64, S = 70, G = H / Hkv, step = 3;
  RandomLayer r(H, Hkv, d, S, 5, 1.0f, step, KvType::F16);
  ThreadPool pool(2);
  // Queries 0..39 at the positions of rows 0..39 (a prompt), then queries 40..69 one at a time at
  // positions past every row (decode steps), then two at once at positions in the middle.
  std::vector<int32_t> pos(S);
  for (int i = 0; i < 40; ++i) pos[static_cast<size_t>(i)] = i * step;
  for (int i = 40; i < S; ++i) pos[static_cast<size_t>(i)] = S * step + i;
  std::vector<std::vector<double>> acc;
  accumulate_attention(r.q.data(), pos.data(), 40, r.cache, 0, r.shape, acc, pool);
  for (int i = 40; i < S - 2; ++i) accumulate_attention(r.q.data() + static_cast<size_t>(i) * H * d, &pos[static_cast<size_t>(i)], 1, r.cache, 0, r.shape, acc, pool);
  pos[S - 2] = 10 * step + 1;  // sees rows 0..10
  pos[S - 1] = 50 * step;      // sees rows 0..50
  accumulate_attention(r.q.data() + static_cast<size_t>(S - 2) * H * d, &pos[S - 2], 2, r.cache, 0, r.shape, acc, pool);
  for (int g = 0; g < Hkv; ++g) {
    std::vector<double> want(S, 0.0);
    for (int i = 0; i < S; ++i) {
      const int n_vis = std::min(S, pos[static_cast<size_t>(i)] / step + 1);
      for (int h = g * G; h < (g + 1) * G; ++h) {
        const std::vector<double> p = r.probs_over_rows(i, h, n_vis);
        for (int j = 0; j < n_vis; ++j) want[static_cast<size_t>(j)] += p[static_cast<size_t>(j)] / G;
      }
    }
    ASSERT_EQ(acc[static_cast<size_t>(g)].size(), static_cast<size_t>(S));
    for (int j = 0; j < S; ++j)
      EXPECT_NEAR(acc[static_cast<size_t>(g)][static_cast<size_t>(j)], want[static_cast<size_t>(j)], 1e-5 * want[static_cast<size_t>(j)] + 1e-6)
          << "kv head " << g << " row " << j;
  }
}

// VABS as algorithm.md §2.4 has it, without the max shift: W_j = exp(x_j) / Z for kept tokens and
// exp(mu) (1 + x_j - mu) / Z for evicted ones, Z = sum_kept exp(x_j) + |E| exp(mu). With a soft-cap
// f (r.shape.softcap; §8): exp(f(x_j)) for kept tokens and exp(f(mu)) (1 + f'(mu) (x_j - mu)) for
// evicted ones, mu their mean raw score, and A the softmax of the capped scores.
// VABS's terms with Sobs observing queries (positions S - Sobs .. S - 1) and prefix P = S - Sw.
VabsTerms vabs_brute_force(const RandomLayer& r, int S, int Sw, int Sobs, const std::vector<std::vector<float>>& ind, int keep) {
  const int H = r.shape.n_heads, d = r.shape.head_dim, G = H / r.shape.n_kv_heads, P = S - Sw;
  VabsTerms t;
  for (int h = 0; h < H; ++h) {
    const KvHead& kv = r.cache.head(0, h / G);
    std::vector<int> order(static_cast<size_t>(P));
    std::iota(order.begin(), order.end(), 0);
    const std::vector<float>& I = ind[static_cast<size_t>(h / G)];
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return I[static_cast<size_t>(a)] > I[static_cast<size_t>(b)]; });
    std::vector<bool> kept(static_cast<size_t>(S), true);
    for (int c = keep; c < P; ++c) kept[static_cast<size_t>(order[static_cast<size_t>(c)])] = false;
    for (int i = 0; i < Sobs; ++i) {
      const int qpos = S - Sobs + i;
      const std::vector<double> A = r.probs(qpos, h, qpos);
      std::vector<double> x;
      for (int j = 0; j <= qpos; ++j)
        x.push_back(test::dot64(&r.q[(static_cast<size_t>(qpos) * H + h) * d], kv.key(j, d), d) / std::sqrt(double(d)));
      const double cap = r.shape.softcap;
      double mu = 0, z = 0, n_e = 0;
      for (int j = 0; j <= qpos; ++j)
        if (!kept[static_cast<size_t>(j)]) mu += x[static_cast<size_t>(j)], ++n_e;
      mu /= n_e;
      const double slope = cap > 0 ? 1.0 - std::pow(std::tanh(mu / cap), 2) : 1.0;
      for (int j = 0; j <= qpos; ++j) z += kept[static_cast<size_t>(j)] ? std::exp(test::capped64(x[static_cast<size_t>(j)], cap)) : 0.0;
      z += n_e * std::exp(test::capped64(mu, cap));
      double tv = 0, va = 0, vnorm_sum = 0, en = 0;
      for (int j = 0; j <= qpos; ++j) {
        const double W = kept[static_cast<size_t>(j)] ? std::exp(test::capped64(x[static_cast<size_t>(j)], cap)) / z
                                                      : std::exp(test::capped64(mu, cap)) * (1 + slope * (x[static_cast<size_t>(j)] - mu)) / z;
        const double vn = std::sqrt(test::dot64(kv.value(j, d), kv.value(j, d), d));
        tv += 0.5 * std::abs(W - A[static_cast<size_t>(j)]);
        va += vn * std::abs(W - A[static_cast<size_t>(j)]);
        vnorm_sum += vn;
        en -= A[static_cast<size_t>(j)] * std::log(A[static_cast<size_t>(j)]);
      }
      t.tv_va += tv * std::pow(va / vnorm_sum, 0.1) / (H * Sobs);
      t.entropy += en / (H * Sobs);
    }
  }
  return t;
}

// Heads of 8 with a window of 8, and heads of 64 with one of 20 (vabs_terms scores the observing
// queries kLanes at a time: a block of 16 and one of 4, which takes the few-rows kernel).
TEST(Vabs, MatchesTheFormulaInFloat64) {
  for (const auto& [d, Sw] : {std::pair{8, 8}, std::pair{64, 20}})
  for (float cap : {0.0f, 1.0f}) {  // and with soft-capped logits (Gemma 2)
  SCOPED_TRACE(cap);
  SCOPED_TRACE(d);
  const int H = 4, Hkv = 2, S = 48, P = S - Sw;
  RandomLayer r(H, Hkv, d, S, 5);
  r.shape.softcap = cap;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<std::vector<float>> ind(Hkv, std::vector<float>(P));
  for (auto& row : ind)
    for (auto& x : row) x = u(rng);
  ThreadPool pool(2);
  // The window queries are the rows of q at positions P .. S-1.
  const float* qw = r.q.data() + static_cast<size_t>(P) * H * d;
  for (int keep : {1, 10, P - 2}) {
    const VabsTerms got = vabs_terms(qw, S, Sw, P, r.cache, 0, r.shape, ind, keep, pool);
    const VabsTerms want = vabs_brute_force(r, S, Sw, Sw, ind, keep);
    EXPECT_NEAR(got.tv_va, want.tv_va, 1e-5 * want.tv_va) << keep;
    EXPECT_NEAR(got.entropy, want.entropy, 1e-6 * want.entropy) << keep;
    EXPECT_GT(got.tv_va, 0.0);
    // The window's last 3 queries alone (slake-wide observes fewer queries than its window keeps).
    const int Sobs = 3;
    const VabsTerms end = vabs_terms(qw + static_cast<size_t>(Sw - Sobs) * H * d, S, Sobs, P, r.cache, 0, r.shape, ind, keep, pool);
    const VabsTerms end_want = vabs_brute_force(r, S, Sw, Sobs, ind, keep);
    EXPECT_NEAR(end.tv_va, end_want.tv_va, 1e-5 * end_want.tv_va) << keep;
    EXPECT_NEAR(end.entropy, end_want.entropy, 1e-6 * end_want.entropy) << keep;
    EXPECT_NE(end.tv_va, got.tv_va) << keep;
  }
  // Keeping every prefix token, PTAA is exact attention: no distortion at all. With one token
  // evicted, mu is its own score and the expansion around it is exact too.
  EXPECT_EQ(vabs_terms(qw, S, Sw, P, r.cache, 0, r.shape, ind, P, pool).tv_va, 0.0);
  EXPECT_NEAR(vabs_terms(qw, S, Sw, P, r.cache, 0, r.shape, ind, P - 1, pool).tv_va, 0.0, 1e-12);
  }
}

TEST(Vabs, StaysFiniteWhenEvictedKeysScoreHigh) {
  const int H = 2, Hkv = 1, d = 8, S = 40, Sw = 4, P = S - Sw;
  RandomLayer r(H, Hkv, d, S, 13, 40.0f);  // scores in the hundreds: exp() alone would overflow
  std::vector<std::vector<float>> ind(Hkv, std::vector<float>(P, 1.0f));
  ThreadPool pool(1);
  const VabsTerms t = vabs_terms(r.q.data() + static_cast<size_t>(P) * H * d, S, Sw, P, r.cache, 0, r.shape, ind, 4, pool);
  EXPECT_TRUE(std::isfinite(t.tv_va));
  EXPECT_TRUE(std::isfinite(t.entropy));
}

// window_stats with Sobs observing queries (positions S - Sobs .. S - 1) scoring the prefix tokens
// before P = S - Sw, against float64; Sobs < Sw is slake-wide's wide window observed by its end.
// gaps: the cache holds what a chunked prefill leaves, each KV head its own subset of the earlier
// positions (rows in position order), and the brute force works on the rows held.
// d and S: the head dimension and prompt length (64 takes the few-rows kernel for blocks of up to 4
// observing queries, window_stats scoring them kLanes at a time).
void expect_window_stats_match_brute_force(int Sw, int Sobs, bool gaps = false, float cap = 0.0f, int d = 8, int S = 40) {
  const int H = 4, Hkv = 2, P = S - Sw, G = H / Hkv;
  const double gamma = 200.0;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  KvCache cache(1, Hkv, d, S);
  std::vector<float> k(Hkv * d), v(Hkv * d);
  for (int j = 0; j < S; ++j) {
    for (auto& x : k) x = 2.0f * nd(rng);
    for (auto& x : v) x = nd(rng);
    cache.append(0, k.data(), v.data(), j);
  }
  if (gaps)  // head 0 drops every third position below 24, head 1 every fourth below 20
    for (int g = 0; g < Hkv; ++g) {
      std::vector<char> keep(static_cast<size_t>(S), 1);
      for (int j = 0; j < S; ++j) keep[static_cast<size_t>(j)] = g == 0 ? !(j < 24 && j % 3 == 1) : !(j < 20 && j % 4 == 2);
      cache.compact_head(0, g, keep, false);
    }
  std::vector<float> q(static_cast<size_t>(Sobs * H * d));
  for (auto& x : q) x = nd(rng);
  ThreadPool pool(2);
  const LayerStats st = window_stats(q.data(), S, Sobs, P, cache, 0, {H, Hkv, d, 0, cap}, gamma, TokenPool::Avg5, pool);

  double entropy = 0, variance = 0;
  std::vector<int> cand(Hkv, 0);  // per KV head: its rows below P
  for (int g = 0; g < Hkv; ++g)
    for (int r = 0; r < cache.head(0, g).n; ++r) cand[static_cast<size_t>(g)] += cache.head(0, g).pos[static_cast<size_t>(r)] < P;
  if (gaps) {
    EXPECT_EQ(cand, (std::vector<int>{P - 8, P - 5}));
  }
  std::vector<std::vector<double>> pooled(Hkv);
  for (int g = 0; g < Hkv; ++g) pooled[static_cast<size_t>(g)].assign(static_cast<size_t>(cand[static_cast<size_t>(g)]), 0.0);
  for (int h = 0; h < H; ++h) {
    const KvHead& kv = cache.head(0, h / G);
    const int Pr = cand[static_cast<size_t>(h / G)];
    std::vector<std::vector<double>> A(Sobs);
    for (int i = 0; i < Sobs; ++i) {
      const int qpos = S - Sobs + i;  // sees every key up to itself, scores only those before P
      int n_vis = 0;
      while (n_vis < kv.n && kv.pos[static_cast<size_t>(n_vis)] <= qpos) ++n_vis;
      const std::vector<double> x = test::attention_probs64(&q[static_cast<size_t>((i * H + h) * d)], kv, d, n_vis, cap);
      A[static_cast<size_t>(i)] = x;
      for (int j = 0; j < Pr; ++j) entropy -= x[static_cast<size_t>(j)] * std::log(x[static_cast<size_t>(j)] + 1e-10);
    }
    const int P = Pr;  // from here on rows, not positions
    std::vector<double> I(P);
    for (int j = 0; j < P; ++j) {
      double mean = 0, var = 0;
      for (int i = 0; i < Sobs; ++i) mean += A[static_cast<size_t>(i)][static_cast<size_t>(j)] / Sobs;
      for (int i = 0; i < Sobs; ++i) var += std::pow(A[static_cast<size_t>(i)][static_cast<size_t>(j)] - mean, 2) / (Sobs - 1);
      I[static_cast<size_t>(j)] = mean + gamma * var;
      variance += var;
    }
    for (int j = 0; j < P; ++j) {
      double acc = 0;
      for (int o = -2; o <= 2; ++o)
        if (j + o >= 0 && j + o < P) acc += I[static_cast<size_t>(j + o)];
      pooled[static_cast<size_t>(h / G)][static_cast<size_t>(j)] += acc / 5.0 / G;
    }
  }
  EXPECT_NEAR(st.entropy, entropy, 1e-5 * entropy);
  EXPECT_NEAR(st.variance, variance, 1e-4 * variance);
  for (int h = 0; h < Hkv; ++h) {
    ASSERT_EQ(st.indicator[static_cast<size_t>(h)].size(), pooled[static_cast<size_t>(h)].size());
    for (int j = 0; j < cand[static_cast<size_t>(h)]; ++j)
      ASSERT_NEAR(st.indicator[static_cast<size_t>(h)][static_cast<size_t>(j)], pooled[static_cast<size_t>(h)][static_cast<size_t>(j)],
                  1e-5 * (1 + pooled[static_cast<size_t>(h)][static_cast<size_t>(j)]));
  }
}

TEST(WindowStats, MatchesBruteForce) { expect_window_stats_match_brute_force(6, 6); }

TEST(WindowStats, SoftCappedLogitsMatchBruteForce) {
  expect_window_stats_match_brute_force(6, 6, false, 1.5f);
  expect_window_stats_match_brute_force(12, 4, true, 1.5f);
}

TEST(WindowStats, FewerObservingQueriesThanTheWindowKeepsMatchBruteForce) {
  expect_window_stats_match_brute_force(12, 4);
  expect_window_stats_match_brute_force(12, 2);
}

// More observing queries than one block of lanes takes (16 and a last block of 4, or of 3), on
// heads of 64, whose blocks of up to 4 queries take the few-rows kernel.
TEST(WindowStats, ObservingQueriesInSeveralBlocksMatchBruteForce) {
  expect_window_stats_match_brute_force(20, 20, false, 0.0f, 64, 60);
  expect_window_stats_match_brute_force(24, 19, true, 1.5f, 64, 60);
  expect_window_stats_match_brute_force(6, 3, false, 0.0f, 64);
}

// A chunked prefill's cache: each KV head holds its own subset of the earlier positions.
TEST(WindowStats, RowsWithGapsMatchBruteForce) {
  expect_window_stats_match_brute_force(6, 6, true);
  expect_window_stats_match_brute_force(12, 4, true);
}

TEST(WindowStats, ObservingQueriesMustLieAfterThePrefix) {
  KvCache cache(1, 1, 8, 20);
  std::vector<float> kv(8, 0.5f), q(static_cast<size_t>(8) * 8, 0.1f);
  for (int j = 0; j < 20; ++j) cache.append(0, kv.data(), kv.data(), j);
  ThreadPool pool(1);
  EXPECT_THROW(window_stats(q.data(), 20, 8, 16, cache, 0, {1, 1, 8, 0}, 1.0, TokenPool::Avg5, pool), Error);
  EXPECT_NO_THROW(window_stats(q.data(), 20, 8, 12, cache, 0, {1, 1, 8, 0}, 1.0, TokenPool::Avg5, pool));
}

}  // namespace
}  // namespace slake
