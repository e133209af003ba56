// A decode step of an attention-scored policy (algorithm.md §5) against float64 brute force: the
// query's scores are computed once (DecodeRowScores) and serve both the eviction score and the
// attention (attention_decode). The victim of each KV head must be the argmin of the score of
// algorithm.md §5.3, evicted in rounds while a head is over its budget, and the step's output must
// be PTAA over what is left, with every evicted token (the step's victims included) in the Taylor
// term.
#include <algorithm>
#include <cmath>
#include <random>

#include "reference_math.h"
#include "slake/kv/attention.h"
#include "slake/kv/kv_evictor.h"
#include "slake/kv/kv_scores.h"
#include "test_util.h"

namespace slake {
namespace {

using Rows = std::vector<std::vector<float>>;

struct Layer {
  KvCache cache;
  std::vector<Rows> ke, ve;  // [kv head]: keys and values already folded into the linear state
};

// One layer of n_kv heads holding `held` rows at increasing positions, after `absorbed` older rows
// of each head went into its linear state. Returns the position of the last row.
int32_t fill_layer(Layer& L, int n_kv, int d, int held, int absorbed, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(n_kv * d)), v(k.size());
  const int total = held + absorbed;
  for (int j = 0; j < total; ++j) {
    for (auto& x : k) x = 1.5f * nd(rng);
    for (auto& x : v) x = nd(rng);
    L.cache.append(0, k.data(), v.data(), j);
  }
  L.ke.assign(static_cast<size_t>(n_kv), {});
  L.ve.assign(static_cast<size_t>(n_kv), {});
  for (int g = 0; g < n_kv; ++g) {
    // Every third of the oldest rows first, then the next oldest, so positions keep gaps.
    std::vector<char> keep(static_cast<size_t>(total), 1);
    int dropped = 0;
    for (int j = 0; j < total && dropped < absorbed; j += 3, ++dropped) keep[static_cast<size_t>(j)] = 0;
    for (int j = 0; j < total && dropped < absorbed; ++j) {
      if (!keep[static_cast<size_t>(j)]) continue;
      keep[static_cast<size_t>(j)] = 0;
      ++dropped;
    }
    const KvHead& kh = L.cache.head(0, g);
    for (int j = 0; j < total; ++j)
      if (!keep[static_cast<size_t>(j)]) {
        L.ke[static_cast<size_t>(g)].emplace_back(kh.key(j, d), kh.key(j, d) + d);
        L.ve[static_cast<size_t>(g)].emplace_back(kh.value(j, d), kh.value(j, d) + d);
      }
    L.cache.compact(0, g, keep, true);
  }
  return total - 1;
}

// algorithm.md §5.3 in float64: each group head's softmax over all rows, average-pooled (kernel 5,
// zero padding, divided by 5) along the n_cand candidates, mean over the group.
// rows[j] = {key, value}.
std::vector<double> scores64(const float* q, int group, const std::vector<Rows>& rows, int d, int n_cand) {
  const int n = static_cast<int>(rows.size());
  std::vector<double> score(static_cast<size_t>(n_cand), 0.0);
  for (int h = 0; h < group; ++h) {
    std::vector<double> p(static_cast<size_t>(n));
    double m = -INFINITY, z = 0;
    for (int j = 0; j < n; ++j)
      m = std::max(m, p[static_cast<size_t>(j)] = test::dot64(q + h * d, rows[static_cast<size_t>(j)][0].data(), d) / std::sqrt(d * 1.0));
    for (double& e : p) z += (e = std::exp(e - m));
    for (int j = 0; j < n_cand; ++j) {
      double s = 0;
      for (int i = std::max(0, j - 2); i <= std::min(n_cand - 1, j + 2); ++i) s += p[static_cast<size_t>(i)] / z;
      score[static_cast<size_t>(j)] += s / 5.0 / group;
    }
  }
  return score;
}

// The victim of algorithm.md §5.3: the candidate of lowest score.
int victim64(const float* q, int group, const std::vector<Rows>& rows, int d, int n_cand) {
  const std::vector<double> score = scores64(q, group, rows, d, n_cand);
  return static_cast<int>(std::min_element(score.begin(), score.end()) - score.begin());
}

// After a decode step: each KV head holds the rows at want_pos, its linear state the want_ke rows,
// the step's scores cover the rows held, and out is PTAA over the head with want_ke/want_ve in the
// Taylor term, in float64.
void expect_step(const KvCache& cache, const float* q, int32_t qpos, const std::vector<float>& out, int n_heads, int d,
                 const std::vector<std::vector<int32_t>>& want_pos, const std::vector<Rows>& want_ke,
                 const std::vector<Rows>& want_ve, const std::vector<DecodeRowScores>& scores, const std::string& what) {
  const int n_kv = cache.n_kv_heads(), group = n_heads / n_kv;
  for (int g = 0; g < n_kv; ++g) {
    const KvHead& kh = cache.head(0, g);
    ASSERT_EQ(kh.pos, want_pos[static_cast<size_t>(g)]) << what << "KV head " << g;
    ASSERT_EQ(kh.lin.n, static_cast<float>(want_ke[static_cast<size_t>(g)].size()));
    ASSERT_EQ(scores[static_cast<size_t>(g)].n, kh.n);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const size_t off = static_cast<size_t>(h) * d;
      const std::vector<double> want =
          test::taylor_attention(q + off, qpos, kh, want_ke[static_cast<size_t>(g)], want_ve[static_cast<size_t>(g)], d);
      for (int i = 0; i < d; ++i)
        ASSERT_NEAR(out[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], 1e-4 * (1 + std::abs(want[static_cast<size_t>(i)])))
            << what << "head " << h << " dim " << i;
    }
  }
}

struct StepCase {
  int n_heads, n_kv_heads, head_dim, over;  // over: rows above budget + window before the step
};

class DecodeStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(DecodeStep, EvictsTheArgminVictimsAndAttendsThroughTheirTaylorTerm) {
  const StepCase c = GetParam();
  const int d = c.head_dim, group = c.n_heads / c.n_kv_heads, C = 40, Sw = 8;
  std::mt19937 rng(17 + c.n_heads + c.over);
  Layer L{KvCache(1, c.n_kv_heads, d, 200), {}, {}};
  const int32_t qpos = fill_layer(L, c.n_kv_heads, d, C + c.over, 23, rng);
  std::vector<float> q(static_cast<size_t>(c.n_heads * d)), out(q.size());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : q) x = nd(rng);

  // Float64: the victims round by round, on a copy of each head's rows (as [row][0] = key).
  std::vector<std::vector<int32_t>> want_pos(static_cast<size_t>(c.n_kv_heads));
  std::vector<Rows> want_ke = L.ke, want_ve = L.ve;
  for (int g = 0; g < c.n_kv_heads; ++g) {
    const KvHead& kh = L.cache.head(0, g);
    std::vector<Rows> rows;  // each row: {key, value}
    std::vector<int32_t> pos = kh.pos;
    for (int j = 0; j < kh.n; ++j)
      rows.push_back({std::vector<float>(kh.key(j, d), kh.key(j, d) + d), std::vector<float>(kh.value(j, d), kh.value(j, d) + d)});
    while (static_cast<int>(rows.size()) > C) {  // budget C - Sw prefix tokens plus the window
      const int v = victim64(q.data() + static_cast<size_t>(g * group) * d, group, rows, d, static_cast<int>(rows.size()) - Sw);
      want_ke[static_cast<size_t>(g)].push_back(rows[static_cast<size_t>(v)][0]);
      want_ve[static_cast<size_t>(g)].push_back(rows[static_cast<size_t>(v)][1]);
      rows.erase(rows.begin() + v);
      pos.erase(pos.begin() + v);
    }
    want_pos[static_cast<size_t>(g)] = pos;
  }

  KvPolicyParams p;
  p.policy = "slake";
  p.budget = C;
  p.window = Sw;
  KvEvictor ev(p, 1, {c.n_heads, c.n_kv_heads, d, 0});
  ThreadPool pool(2);
  ev.on_decode(0, q.data(), qpos, L.cache, pool);
  const std::vector<DecodeRowScores>* scores = ev.decode_row_scores(0);
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(ev.decode_row_scores(1), nullptr);
  attention_decode(out.data(), q.data(), qpos, L.cache, 0, {c.n_heads, c.n_kv_heads, d, 0}, *scores, pool);
  expect_step(L.cache, q.data(), qpos, out, c.n_heads, d, want_pos, want_ke, want_ve, *scores, "");
}

// Groups of 1, 8 and 20 (two lane blocks); one row over (the usual step) and three (rounds).
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeStep,
                         ::testing::Values(StepCase{2, 2, 16, 1}, StepCase{8, 2, 16, 1}, StepCase{8, 1, 64, 3},
                                           StepCase{20, 1, 16, 1}, StepCase{20, 1, 16, 3}, StepCase{8, 2, 16, 0}),
                         [](const ::testing::TestParamInfo<StepCase>& i) {
                           const StepCase& c = i.param;
                           return "h" + std::to_string(c.n_heads) + "_kv" + std::to_string(c.n_kv_heads) + "_d" +
                                  std::to_string(c.head_dim) + "_over" + std::to_string(c.over);
                         });

// With the scores handed in, attention_decode gives attention_prefill's result for that token:
// GQA groups of 1 to 20 and sliding windows, against float64 softmax.
TEST(AttentionDecode, MatchesFloat64WithScoresComputedOnce) {
  struct S {
    int n_heads, n_kv, d, n_keys, window;
  };
  for (const S s : {S{4, 4, 8, 1, 0}, S{8, 2, 16, 65, 0}, S{32, 4, 64, 300, 0}, S{20, 1, 16, 70, 0}, S{8, 1, 64, 257, 64},
                    S{6, 3, 12, 130, 17}, S{9, 3, 64, 2500, 0}, S{8, 2, 16, 1500, 600}}) {  // the last two split their keys
    std::mt19937 rng(5 + s.n_keys);
    std::normal_distribution<float> nd(0.0f, 1.5f);
    KvCache cache(1, s.n_kv, s.d, s.n_keys);
    std::vector<float> k(static_cast<size_t>(s.n_kv * s.d)), v(k.size());
    for (int j = 0; j < s.n_keys; ++j) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      cache.append(0, k.data(), v.data(), 2 * j);
    }
    const int group = s.n_heads / s.n_kv;
    const int32_t qpos = 2 * (s.n_keys - 1);
    std::vector<float> q(static_cast<size_t>(s.n_heads * s.d)), out(q.size());
    for (auto& x : q) x = nd(rng);
    std::vector<DecodeRowScores> xs(static_cast<size_t>(s.n_kv));
    for (int g = 0; g < s.n_kv; ++g) xs[static_cast<size_t>(g)].compute(q.data() + static_cast<size_t>(g * group) * s.d, group, qpos, cache.head(0, g), s.d, 0.0f);
    ThreadPool pool(2);
    attention_decode(out.data(), q.data(), qpos, cache, 0, {s.n_heads, s.n_kv, s.d, s.window}, xs, pool);
    for (int h = 0; h < s.n_heads; ++h) {
      const size_t off = static_cast<size_t>(h) * s.d;
      const std::vector<double> want = test::softmax_attention(q.data() + off, qpos, cache.head(0, h / group), s.d, s.window);
      for (int i = 0; i < s.d; ++i)
        ASSERT_NEAR(out[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], 2e-5 * (1 + std::abs(want[static_cast<size_t>(i)])))
            << "heads " << s.n_heads << " keys " << s.n_keys << " head " << h << " dim " << i;
    }
    // The same sums as attention_prefill, whose keys are split the same way.
    std::vector<float> pre(q.size());
    attention_prefill(pre.data(), q.data(), &qpos, 1, cache, 0, {s.n_heads, s.n_kv, s.d, s.window}, pool);
    EXPECT_EQ(out, pre) << "keys " << s.n_keys;
    // Scores that do not match the cache are refused rather than read out of bounds.
    xs[0].erase(0);
    EXPECT_THROW(attention_decode(out.data(), q.data(), qpos, cache, 0, {s.n_heads, s.n_kv, s.d, s.window}, xs, pool), Error);
  }
}
// --kv-evict-every k: a head over budget + window by fewer than k rows keeps them all; at k or
// more it gives up all of them at once, the lowest scores of one float64 scoring (not in rounds),
// and the step's output is PTAA over what is left with them in the Taylor term.
TEST(DecodeStep, BatchedEvictionWaitsForKRowsThenEvictsTheLowestScoresOfOneScoring) {
  const int n_heads = 8, n_kv = 2, d = 16, group = n_heads / n_kv, C = 40, Sw = 8, k = 4;
  for (int over : {k - 1, k, k + 2}) {
    std::mt19937 rng(29 + over);
    Layer L{KvCache(1, n_kv, d, 200), {}, {}};
    const int32_t qpos = fill_layer(L, n_kv, d, C + over, 23, rng);
    std::vector<float> q(static_cast<size_t>(n_heads * d)), out(q.size());
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& x : q) x = nd(rng);

    std::vector<std::vector<int32_t>> want_pos(static_cast<size_t>(n_kv));
    std::vector<Rows> want_ke = L.ke, want_ve = L.ve;
    for (int g = 0; g < n_kv; ++g) {
      const KvHead& kh = L.cache.head(0, g);
      std::vector<Rows> rows;
      for (int j = 0; j < kh.n; ++j)
        rows.push_back({std::vector<float>(kh.key(j, d), kh.key(j, d) + d), std::vector<float>(kh.value(j, d), kh.value(j, d) + d)});
      const int n_cand = kh.n - Sw;
      std::vector<int> order(static_cast<size_t>(n_cand));
      for (int j = 0; j < n_cand; ++j) order[static_cast<size_t>(j)] = j;
      const std::vector<double> s = scores64(q.data() + static_cast<size_t>(g * group) * d, group, rows, d, n_cand);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return s[static_cast<size_t>(a)] < s[static_cast<size_t>(b)]; });
      std::vector<char> evicted(static_cast<size_t>(kh.n), 0);
      if (over >= k)
        for (int i = 0; i < over; ++i) evicted[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
      for (int j = 0; j < kh.n; ++j) {
        if (!evicted[static_cast<size_t>(j)]) {
          want_pos[static_cast<size_t>(g)].push_back(kh.pos[static_cast<size_t>(j)]);
          continue;
        }
        want_ke[static_cast<size_t>(g)].push_back(rows[static_cast<size_t>(j)][0]);
        want_ve[static_cast<size_t>(g)].push_back(rows[static_cast<size_t>(j)][1]);
      }
    }

    KvPolicyParams p;
    p.policy = "slake";
    p.budget = C;
    p.window = Sw;
    p.evict_every = k;
    KvEvictor ev(p, 1, {n_heads, n_kv, d, 0});
    ThreadPool pool(2);
    ev.on_decode(0, q.data(), qpos, L.cache, pool);
    const std::vector<DecodeRowScores>* scores = ev.decode_row_scores(0);
    ASSERT_NE(scores, nullptr);
    attention_decode(out.data(), q.data(), qpos, L.cache, 0, {n_heads, n_kv, d, 0}, *scores, pool);
    expect_step(L.cache, q.data(), qpos, out, n_heads, d, want_pos, want_ke, want_ve, *scores, "over " + std::to_string(over) + ", ");
  }
}

// H2O scores its decode query once too: the query's softmax row joins the accumulated sums, the
// victim is the candidate with the lowest sum, and attention_decode attends with the same scores.
// Against float64: every query's softmax row (prompt and decode, group of 3) summed per KV head
// over the rows it could see, the argmin evicted, and softmax attention over the rows left.
TEST(DecodeStep, H2oEvictsTheLowestAccumulatedAttentionAndAttendsWithItsScores) {
  const int n_heads = 6, n_kv = 2, d = 16, G = n_heads / n_kv, S = 10, steps = 24;
  KvPolicyParams p;
  p.policy = "h2o";
  p.budget = 12;
  p.window = 4;
  KvEvictor ev(p, 1, {n_heads, n_kv, d, 0});
  KvCache cache(1, n_kv, d, S + steps);
  ThreadPool pool(2);
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> k(static_cast<size_t>(n_kv * d)), v(k.size()), q(static_cast<size_t>(S * n_heads * d));
  // The reference state per KV head: held positions, in order, and each position's sum.
  std::vector<std::vector<int32_t>> held(n_kv);
  std::vector<std::vector<double>> sum(n_kv, std::vector<double>(S + steps, 0.0));
  auto add_query = [&](const float* qt, int32_t qpos) {
    for (int h = 0; h < n_heads; ++h) {
      const KvHead& kh = cache.head(0, h / G);
      // Rows hold increasing positions, so the rows qpos sees are a prefix.
      const int n_vis = static_cast<int>(std::count_if(kh.pos.begin(), kh.pos.begin() + kh.n, [&](int32_t p) { return p <= qpos; }));
      const std::vector<double> pr = test::attention_probs64(qt + h * d, kh, d, n_vis);
      for (int j = 0; j < n_vis; ++j) sum[static_cast<size_t>(h / G)][static_cast<size_t>(kh.pos[static_cast<size_t>(j)])] += pr[static_cast<size_t>(j)] / G;
    }
  };
  // A prompt short enough to keep (S <= C + Sw), observed in two parts as prefill does.
  ev.begin_prompt(S);
  std::vector<int32_t> pos(S);
  for (int j = 0; j < S; ++j) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    cache.append(0, k.data(), v.data(), j);
    pos[static_cast<size_t>(j)] = j;
    for (int g = 0; g < n_kv; ++g) held[static_cast<size_t>(g)].push_back(j);
  }
  for (auto& x : q) x = nd(rng);
  ev.observe(0, q.data(), pos.data(), 6, cache, pool);
  ev.observe(0, q.data() + 6 * n_heads * d, pos.data() + 6, S - 6, cache, pool);
  for (int i = 0; i < S; ++i) add_query(q.data() + static_cast<size_t>(i) * n_heads * d, i);
  ev.on_layer_done(0, cache, pool);
  ev.finish(cache);
  ASSERT_EQ(cache.head(0, 0).n, S);

  std::vector<float> qd(static_cast<size_t>(n_heads * d)), out(qd.size());
  int evicted = 0;
  for (int t = 0; t < steps; ++t) {
    const int32_t qpos = S + t;
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    for (auto& x : qd) x = nd(rng);
    cache.append(0, k.data(), v.data(), qpos);
    for (int g = 0; g < n_kv; ++g) held[static_cast<size_t>(g)].push_back(qpos);
    add_query(qd.data(), qpos);
    ev.on_decode(0, qd.data(), qpos, cache, pool);
    for (int g = 0; g < n_kv; ++g) {
      std::vector<int32_t>& hp = held[static_cast<size_t>(g)];
      if (static_cast<int>(hp.size()) > p.budget) {  // C - Sw prefix rows + the window: the lowest sum outside the window goes
        auto victim = std::min_element(hp.begin(), hp.end() - p.window, [&](int32_t a, int32_t b) {
          return sum[static_cast<size_t>(g)][static_cast<size_t>(a)] < sum[static_cast<size_t>(g)][static_cast<size_t>(b)];
        });
        hp.erase(victim);
        ++evicted;
      }
      const KvHead& kh = cache.head(0, g);
      ASSERT_EQ(std::vector<int32_t>(kh.pos.begin(), kh.pos.begin() + kh.n), hp) << "step " << t << " kv head " << g;
    }
    const std::vector<DecodeRowScores>* scores = ev.decode_row_scores(0);
    ASSERT_NE(scores, nullptr);
    attention_decode(out.data(), qd.data(), qpos, cache, 0, {n_heads, n_kv, d, 0}, *scores, pool);
    for (int h = 0; h < n_heads; ++h) {
      const std::vector<double> want = test::softmax_attention(qd.data() + h * d, qpos, cache.head(0, h / G), d, 0);
      for (int i = 0; i < d; ++i)
        ASSERT_NEAR(out[static_cast<size_t>(h * d + i)], want[static_cast<size_t>(i)], 2e-5 * (1 + std::abs(want[static_cast<size_t>(i)])))
            << "step " << t << " head " << h;
    }
  }
  EXPECT_EQ(evicted, 2 * (S + steps - p.budget));
}

TEST(DecodeStep, PoliciesThatDoNotScoreByAttentionLeaveNoScores) {
  ThreadPool pool(1);
  for (const char* name : {"full", "streaming"}) {
    KvPolicyParams p;
    p.policy = name;
    p.budget = 16;
    p.window = 4;
    KvEvictor ev(p, 1, {4, 2, 8, 0});
    KvCache cache(1, 2, 8, 32);
    std::vector<float> kv(16, 0.5f), q(32, 0.25f);
    for (int j = 0; j < 20; ++j) cache.append(0, kv.data(), kv.data(), j);
    ev.on_decode(0, q.data(), 19, cache, pool);
    EXPECT_EQ(ev.decode_row_scores(0), nullptr) << name;
  }
}

}  // namespace
}  // namespace slake
