// Self-recall error and SRE-mass sizing (src/kv/kv_sre.cpp, algorithm.md §2.8) against float64
// brute force: each token's SRE under the Taylor state and under centroids, zero where the state
// gives a token's value back exactly, the mass rule, and the sre selector end to end on one layer
// (the tokens kept at prefill, each head's own budget, the decode victims).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <map>

#include "reference_math.h"
#include "slake/error.h"
#include "slake/kv/kv_evictor.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/kv_sre.h"

namespace slake {
namespace {

// snapkv's budgets with the SRE selector over a Taylor state (and SRE-mass when mass > 0).
KvPolicyParams sre_snapkv(int budget, int window, double mass = 0.0) {
  KvPolicyParams p;
  p.policy = "snapkv";
  p.compensate = "taylor";
  p.selector = "sre";
  p.sre_mass = mass;
  p.budget = budget;
  p.window = window;
  return p;
}

struct Rows {
  int d;
  std::vector<std::vector<float>> k, v;  // [position][d]
};

// The Taylor state's output (algorithm.md §4.1, no exact row) for query q over the tokens `set`,
// in float64: ((1 - mu) sum v + sum x_i v_i) / n with x_i = q . k_i / sqrt(d), mu their mean.
std::vector<double> taylor_out(const Rows& r, const std::vector<int>& set, const float* q) {
  const int d = r.d;
  std::vector<double> x;
  for (int i : set) x.push_back(test::dot64(q, r.k[static_cast<size_t>(i)].data(), d) / std::sqrt(double(d)));
  const double mu = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(set.size());
  std::vector<double> o(static_cast<size_t>(d), 0.0);
  for (size_t t = 0; t < set.size(); ++t)
    for (int j = 0; j < d; ++j) o[static_cast<size_t>(j)] += (1 - mu + x[t]) * r.v[static_cast<size_t>(set[t])][static_cast<size_t>(j)];
  for (double& e : o) e /= static_cast<double>(set.size());
  return o;
}

double sq_dist(const std::vector<double>& o, const std::vector<float>& v) {
  double e = 0;
  for (size_t j = 0; j < o.size(); ++j) e += (o[j] - v[j]) * (o[j] - v[j]);
  return e;
}

// A head of n random rows at positions 0..n-1 (f32 keys and values), and the same rows kept aside.
KvCache random_head(int n, int d, unsigned seed, Rows& rows, float value_scale = 1.0f, bool same_value = false) {
  KvCache cache(1, 1, d, n, 0, KvType::F32, KvType::F32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  rows = Rows{d, {}, {}};
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d)), v0(static_cast<size_t>(d));
  for (float& x : v0) x = nd(rng);
  for (int j = 0; j < n; ++j) {
    for (float& x : k) x = 0.5f * nd(rng);
    for (float& x : v) x = value_scale * nd(rng);
    if (same_value) v = v0;
    cache.append(0, k.data(), v.data(), j);
    rows.k.push_back(k);
    rows.v.push_back(v);
  }
  return cache;
}

TEST(Sre, TaylorErrorsMatchFloat64) {
  const int n = 40, d = 16;
  Rows rows;
  KvCache cache = random_head(n, d, 3, rows);
  const KvHead& kh = cache.head(0, 0);
  const LinearState st = state_with_rows(kh, 0, n, LinearState(d), d);
  ASSERT_EQ(st.n, n);
  std::vector<float> got(n);
  self_recall_errors(kh, 0, n, st, d, got.data());
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  for (int j = 0; j < n; ++j) {
    const double want = sq_dist(taylor_out(rows, all, rows.k[static_cast<size_t>(j)].data()), rows.v[static_cast<size_t>(j)]);
    EXPECT_NEAR(got[static_cast<size_t>(j)], want, 1e-4 * want + 1e-6) << j;
  }
}

TEST(Sre, ZeroWhereTheStateGivesTheValueBack) {
  const int d = 16;
  {  // every token has the same value: the Taylor weights sum to n, so the state answers v itself
    Rows rows;
    KvCache cache = random_head(30, d, 5, rows, 1.0f, true);
    const LinearState st = state_with_rows(cache.head(0, 0), 0, 30, LinearState(d), d);
    std::vector<float> e(30);
    self_recall_errors(cache.head(0, 0), 0, 30, st, d, e.data());
    for (float x : e) EXPECT_LT(x, 1e-9f);
  }
  for (int centroids : {0, 4}) {  // a state of one token answers that token's value
    Rows rows;
    KvCache cache = random_head(3, d, 7, rows);
    const LinearState st = state_with_rows(cache.head(0, 0), 1, 2, LinearState(d, centroids), d);
    float e = -1;
    self_recall_errors(cache.head(0, 0), 1, 2, st, d, &e);
    EXPECT_LT(e, 1e-9f) << centroids;
    float other = -1;  // and another token's value, not
    self_recall_errors(cache.head(0, 0), 0, 1, st, d, &other);
    EXPECT_NEAR(other, sq_dist(std::vector<double>(rows.v[1].begin(), rows.v[1].end()), rows.v[0]), 1e-4);
  }
  Rows rows;  // an empty state holds nothing to compare: 0
  KvCache cache = random_head(4, d, 9, rows);
  std::vector<float> e(4, -1.0f);
  self_recall_errors(cache.head(0, 0), 0, 4, LinearState(d), d, e.data());
  EXPECT_EQ(e, std::vector<float>(4, 0.0f));
}

// With a centroid for every token nothing is merged: the state is exact softmax attention over the
// tokens, and a token's error is its distance from that attention's output for its own key.
TEST(Sre, CentroidsWithRoomForEveryTokenAreSoftmaxAttention) {
  const int n = 12, d = 8;
  Rows rows;
  KvCache cache = random_head(n, d, 11, rows, 2.0f);
  const KvHead& kh = cache.head(0, 0);
  const LinearState st = state_with_rows(kh, 0, n, LinearState(d, 16), d);
  std::vector<float> got(n);
  self_recall_errors(kh, 0, n, st, d, got.data());
  for (int j = 0; j < n; ++j) {
    const std::vector<double> p = test::attention_probs64(rows.k[static_cast<size_t>(j)].data(), kh, d, n);
    std::vector<double> o(static_cast<size_t>(d), 0.0);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < d; ++c) o[static_cast<size_t>(c)] += p[static_cast<size_t>(i)] * rows.v[static_cast<size_t>(i)][static_cast<size_t>(c)];
    const double want = sq_dist(o, rows.v[static_cast<size_t>(j)]);
    EXPECT_NEAR(got[static_cast<size_t>(j)], want, 1e-4 * want + 1e-6) << j;
  }
}

TEST(Sre, MassKeepsTheFewestLargestErrorsCoveringTheShare) {
  std::mt19937 rng(13);
  std::exponential_distribution<float> ex(1.0f);
  for (int n : {1, 7, 50}) {
    std::vector<float> e(static_cast<size_t>(n));
    for (float& x : e) x = ex(rng);
    std::vector<double> sorted(e.begin(), e.end());
    std::sort(sorted.rbegin(), sorted.rend());
    const double total = std::accumulate(sorted.begin(), sorted.end(), 0.0);
    for (double p : {0.3, 0.5, 0.9, 1.0}) {
      int64_t want = 0;
      double sum = 0;
      while (sum < p * total - 1e-9 * total) sum += sorted[static_cast<size_t>(want++)];
      EXPECT_EQ(sre_mass_keep(e.data(), n, p, 0, n), want) << n << " " << p;
      EXPECT_EQ(sre_mass_keep(e.data(), n, p, want + 1, n), std::min<int64_t>(want + 1, n));  // the floor
      EXPECT_EQ(sre_mass_keep(e.data(), n, p, 0, want - 1 < 0 ? 0 : want - 1), std::max<int64_t>(want - 1, 0));  // the cap
    }
  }
  const std::vector<float> zero(5, 0.0f);
  EXPECT_EQ(sre_mass_keep(zero.data(), 5, 0.9, 0, 5), 0);
  EXPECT_EQ(sre_mass_keep(zero.data(), 5, 0.9, 2, 5), 2);
}

// The sre selector on one layer of two KV heads: at prefill each head keeps the candidates of
// highest SRE against the state of every candidate (with SRE-mass, as many as the mass rule
// says, each head its own), and at decode each head stays at its budget, evicting the lowest SRE,
// a row that left the window scored against the state of what was evicted plus itself.
TEST(Sre, SelectorKeepsAndEvictsAsTheFormulaSays) {
  const int n_heads = 4, n_kv = 2, d = 16, S = 60, steps = 16, C = 40, Sw = 4;
  for (double mass : {0.0, 0.5}) {
    SCOPED_TRACE(mass);
    const KvPolicyParams p = sre_snapkv(C, Sw, mass);
    KvEvictor ev(p, 1, {n_heads, n_kv, d, 0});
    KvCache cache(1, n_kv, d, S + steps, 0, KvType::F32, KvType::F32);
    ThreadPool pool(2);
    std::mt19937 rng(19);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<Rows> rows(n_kv, Rows{d, {}, {}});
    std::vector<std::vector<int>> held(n_kv), evicted(n_kv);
    std::vector<std::map<int, double>> sre(n_kv);  // the reference's error of each candidate
    std::vector<float> k(static_cast<size_t>(n_kv * d)), v(k.size());
    auto append = [&](int at) {
      for (float& x : k) x = 0.5f * nd(rng);
      for (float& x : v) x = nd(rng);
      const float spread = std::exp(1.5f * nd(rng));  // head 1: a few tokens hold most of the error
      for (int j = d; j < 2 * d; ++j) v[static_cast<size_t>(j)] *= spread;
      cache.append(0, k.data(), v.data(), at);
      for (int g = 0; g < n_kv; ++g) {
        rows[static_cast<size_t>(g)].k.emplace_back(k.begin() + g * d, k.begin() + (g + 1) * d);
        rows[static_cast<size_t>(g)].v.emplace_back(v.begin() + g * d, v.begin() + (g + 1) * d);
        held[static_cast<size_t>(g)].push_back(at);
      }
    };
    ev.begin_prompt(S);
    std::vector<int32_t> pos(S);
    for (int j = 0; j < S; ++j) {
      append(j);
      pos[static_cast<size_t>(j)] = j;
    }
    std::vector<float> q(static_cast<size_t>(S) * n_heads * d);
    for (float& x : q) x = nd(rng);
    ev.observe(0, q.data(), pos.data(), S, cache, pool);
    ev.on_layer_done(0, cache, pool);
    ev.finish(cache);
    std::vector<int64_t> budget(n_kv);
    for (int g = 0; g < n_kv; ++g) {
      const Rows& r = rows[static_cast<size_t>(g)];
      const int n_cand = S - Sw;
      std::vector<int> cand(n_cand);
      std::iota(cand.begin(), cand.end(), 0);
      std::vector<double> e(n_cand);
      for (int j = 0; j < n_cand; ++j) e[static_cast<size_t>(j)] = sre[static_cast<size_t>(g)][j] = sq_dist(taylor_out(r, cand, r.k[static_cast<size_t>(j)].data()), r.v[static_cast<size_t>(j)]);
      if (mass > 0) {
        std::vector<double> s = e;
        std::sort(s.rbegin(), s.rend());
        const double total = std::accumulate(s.begin(), s.end(), 0.0);
        double sum = 0;
        budget[static_cast<size_t>(g)] = 0;
        while (sum < mass * total * (1 - 1e-6)) sum += s[static_cast<size_t>(budget[static_cast<size_t>(g)]++)];
        budget[static_cast<size_t>(g)] = std::min<int64_t>(budget[static_cast<size_t>(g)], C - Sw);
      } else {
        budget[static_cast<size_t>(g)] = C - Sw;
      }
      const std::vector<char> keep = top_k_flags(e.data(), n_cand, budget[static_cast<size_t>(g)]);
      std::vector<int> kept;
      for (int j = 0; j < S; ++j)
        if (j >= n_cand || keep[static_cast<size_t>(j)]) kept.push_back(j);
        else evicted[static_cast<size_t>(g)].push_back(j);
      held[static_cast<size_t>(g)] = kept;
      const KvHead& kh = cache.head(0, g);
      ASSERT_EQ(std::vector<int>(kh.pos.begin(), kh.pos.begin() + kh.n), held[static_cast<size_t>(g)]) << "prefill, kv head " << g;
      ASSERT_EQ(kh.lin.n, static_cast<float>(evicted[static_cast<size_t>(g)].size()));
    }
    if (mass > 0) {
      EXPECT_NE(budget[0], budget[1]);  // each head its own size
    }
    std::vector<float> qd(static_cast<size_t>(n_heads * d));
    for (int t = 0; t < steps; ++t) {
      const int qpos = S + t;
      append(qpos);
      for (float& x : qd) x = nd(rng);
      ev.on_decode(0, qd.data(), qpos, cache, pool);
      for (int g = 0; g < n_kv; ++g) {
        std::vector<int>& hp = held[static_cast<size_t>(g)];
        const int n_cand = static_cast<int>(hp.size()) - Sw;
        const int fresh = hp[static_cast<size_t>(n_cand - 1)];  // the row that just left the window
        std::vector<int> with = evicted[static_cast<size_t>(g)];
        with.push_back(fresh);
        const Rows& r = rows[static_cast<size_t>(g)];
        sre[static_cast<size_t>(g)][fresh] = sq_dist(taylor_out(r, with, r.k[static_cast<size_t>(fresh)].data()), r.v[static_cast<size_t>(fresh)]);
        auto victim = std::min_element(hp.begin(), hp.begin() + n_cand, [&](int a, int b) {
          return sre[static_cast<size_t>(g)][a] < sre[static_cast<size_t>(g)][b];
        });
        evicted[static_cast<size_t>(g)].push_back(*victim);
        hp.erase(victim);
        const KvHead& kh = cache.head(0, g);
        ASSERT_EQ(kh.n, budget[static_cast<size_t>(g)] + Sw);
        ASSERT_EQ(std::vector<int>(kh.pos.begin(), kh.pos.begin() + kh.n), hp) << "step " << t << ", kv head " << g;
      }
    }
  }
}

// A prompt too short to evict at prefill leaves its rows unscored; the first decode eviction
// scores them together, as prefill would, against the state holding all of them (one row alone
// against a state of itself would score 0 and evict the oldest).
TEST(Sre, RowsUnscoredAtPrefillAreScoredTogether) {
  const int n_heads = 2, n_kv = 1, d = 16, S = 20, C = 16, Sw = 4;
  const KvPolicyParams p = sre_snapkv(C, Sw);
  KvEvictor ev(p, 1, {n_heads, n_kv, d, 0});
  KvCache cache(1, n_kv, d, S + 1, 0, KvType::F32, KvType::F32);
  ThreadPool pool(2);
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Rows rows{d, {}, {}};
  std::vector<float> k(static_cast<size_t>(d)), v(k.size()), q(static_cast<size_t>(n_heads * d));
  auto append = [&](int at) {
    for (float& x : k) x = 0.5f * nd(rng);
    for (float& x : v) x = nd(rng) * (at % 3 == 0 ? 3.0f : 1.0f);
    cache.append(0, k.data(), v.data(), at);
    rows.k.push_back(k);
    rows.v.push_back(v);
  };
  ev.begin_prompt(S);  // S = C + Sw: nothing evicted at prefill
  std::vector<int32_t> pos(S);
  std::vector<float> qs(static_cast<size_t>(S) * n_heads * d);
  for (int j = 0; j < S; ++j) append(pos[static_cast<size_t>(j)] = j);
  for (float& x : qs) x = nd(rng);
  ev.observe(0, qs.data(), pos.data(), S, cache, pool);
  ev.on_layer_done(0, cache, pool);
  ev.finish(cache);
  ASSERT_EQ(cache.head(0, 0).n, S);
  append(S);
  for (float& x : q) x = nd(rng);
  ev.on_decode(0, q.data(), S, cache, pool);
  const int n_cand = S + 1 - Sw;
  std::vector<int> cand(static_cast<size_t>(n_cand));
  std::iota(cand.begin(), cand.end(), 0);
  std::vector<double> e(static_cast<size_t>(n_cand));
  for (int j = 0; j < n_cand; ++j) e[static_cast<size_t>(j)] = sq_dist(taylor_out(rows, cand, rows.k[static_cast<size_t>(j)].data()), rows.v[static_cast<size_t>(j)]);
  // The head holds S + 1 rows against C: it gives up the S + 1 - C lowest, one round each, with
  // the scores of the first.
  std::vector<int> order(static_cast<size_t>(n_cand));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return e[static_cast<size_t>(a)] < e[static_cast<size_t>(b)]; });
  const std::vector<int> victims(order.begin(), order.begin() + (S + 1 - C));
  ASSERT_NE(victims, std::vector<int>({0, 1, 2, 3, 4}));  // not the oldest: the scores are real
  std::vector<int32_t> want;
  for (int j = 0; j <= S; ++j)
    if (std::find(victims.begin(), victims.end(), j) == victims.end()) want.push_back(j);
  const KvHead& kh = cache.head(0, 0);
  EXPECT_EQ(std::vector<int32_t>(kh.pos.begin(), kh.pos.begin() + kh.n), want);
}

TEST(Sre, Settings) {
  KvPolicyParams p;
  p.policy = "slake";  // taylor by default
  p.budget = 64;
  p.sre_mass = 0.9;
  EXPECT_EQ(policy_parts(p).selector, KvSelector::Sre);
  EXPECT_NO_THROW(validate(p));
  EXPECT_EQ(kv_policy_label(p), "slake@sre:0.9");
  EXPECT_EQ(with_policy_label({}, "slake@sre:0.9").sre_mass, 0.9);
  EXPECT_EQ(kv_policy_label(with_policy_label({}, "cake@sre")), "cake@sre");
  for (const char* bad : {"slake@sre:", "slake@sre:1.5", "slake@sre:0", "slake@sre:x"}) EXPECT_THROW(with_policy_label({}, bad), Error) << bad;
  p.policy = "cake";  // no compensator: nothing to measure
  EXPECT_THROW(validate(p), Error);
  p.compensate = "centroids";
  EXPECT_NO_THROW(validate(p));
  p.sre_mass = 1.5;
  EXPECT_THROW(validate(p), Error);
  p.sre_mass = 0.5;
  p.selector = "ahakv";
  EXPECT_THROW(validate(p), Error);
  p.selector = "sre";
  p.prefill_chunk = 128;
  EXPECT_THROW(validate(p), Error);
  p.prefill_chunk = 0;
  p.selector = "auto";
  p.policy = "streaming";  // SRE-mass replaces the selector: not streaming's own rule
  EXPECT_THROW(validate(p), Error);
  KvPolicyParams q;  // a share that %g would round reads back exactly
  q.policy = "slake";
  q.budget = 64;
  q.sre_mass = 0.123456789;
  EXPECT_EQ(with_policy_label({}, kv_policy_label(q)).sre_mass, q.sre_mass);
}

}  // namespace
}  // namespace slake
