// AhaKV's scores (src/kv/kv_ahakv.cpp, algorithm.md §2.3 and §5.3) against float64 brute force
// written from the formulas: the step gain, the value prior, the ring of recent sums, the gained
// softmax rows, and the ahakv selector end to end (prefill eviction and decode victims) with each
// combination of its three parts, none of them being H2O.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "reference_math.h"
#include "slake/error.h"
#include "slake/kv/kv_ahakv.h"
#include "slake/kv/kv_evictor.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/kv_scores.h"

namespace slake {
namespace {

TEST(AhaKv, StepGainSharpensOnlyRowsLongerThanTheBudgetTimesRootE) {
  EXPECT_EQ(step_gain(100, 0), 1.0);    // no budget
  EXPECT_EQ(step_gain(100, 100), 1.0);  // log(1) = 0: the model's own scale
  EXPECT_EQ(step_gain(160, 100), 1.0);  // 2 ln 1.6 = 0.94 < 1
  for (int64_t k : {7, 64, 1000}) {
    const double e2 = std::exp(2.0);  // i = k e^2: sqrt(2 * 2) = 2
    EXPECT_NEAR(step_gain(static_cast<int64_t>(std::llround(k * e2 * 1000)), k * 1000), 2.0, 1e-4);
    const int64_t i = 50 * k;
    EXPECT_NEAR(step_gain(i, k), std::sqrt(2.0 * std::log(50.0)), 1e-12);
  }
}

TEST(AhaKv, ValuePriorIsThePooledNormOverItsMaximum) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(0.0f, 3.0f);
  for (int n : {1, 4, 9, 33}) {
    std::vector<float> v2(static_cast<size_t>(n));
    for (float& x : v2) x = u(rng);
    std::vector<double> got(static_cast<size_t>(n)), pooled(static_cast<size_t>(n));
    value_prior(v2.data(), n, got.data());
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = j - 2; k <= j + 2; ++k) s += k >= 0 && k < n ? v2[static_cast<size_t>(k)] : 0.0;
      pooled[static_cast<size_t>(j)] = s / 5.0;
    }
    const double m = *std::max_element(pooled.begin(), pooled.end());
    for (int j = 0; j < n; ++j) EXPECT_NEAR(got[static_cast<size_t>(j)], pooled[static_cast<size_t>(j)] / m, 1e-12) << n << " " << j;
  }
  const std::vector<float> zero(5, 0.0f);
  std::vector<double> ones(5);
  value_prior(zero.data(), 5, ones.data());
  EXPECT_EQ(ones, std::vector<double>(5, 1.0));
}

TEST(AhaKv, PartsParseAndPrint) {
  EXPECT_EQ(aha_parts_name(parse_aha_parts("value+gain")), "gain+value");
  EXPECT_EQ(aha_parts_name(parse_aha_parts("gain+recent+value")), "gain+recent+value");
  EXPECT_EQ(aha_parts_name(parse_aha_parts("none")), "none");
  EXPECT_EQ(parse_aha_parts("recent"), (AhaParts{false, true, false}));
  for (const char* bad : {"", "gain+", "gain,value", "recent+recent", "bias", "none+gain"}) EXPECT_THROW(parse_aha_parts(bad), Error) << bad;
}

// The ring against a plain list of every row added: each sum is that of the last r queries' rows
// (0 for rows appended after a query), through rows that grow and rows evicted in between.
TEST(AhaKv, RecentSumsAreTheLastRQueriesRows) {
  for (int r : {0, 1, 3, 8}) {
    std::mt19937 rng(10 + r);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    AttentionSums sums(r);
    std::vector<std::vector<double>> added;  // per query, per current row
    for (int t = 0; t < 60; ++t) {
      const int n = std::max(sums.rows(), 5) + static_cast<int>(rng() % 2);  // sometimes a new row
      std::vector<double> a(static_cast<size_t>(n));
      for (double& x : a) x = static_cast<float>(u(rng));  // values a ring of floats holds exactly
      sums.add(a.data(), n, 100 + t);
      for (std::vector<double>& row : added) row.resize(static_cast<size_t>(n), 0.0);
      added.push_back(a);
      if (t % 7 == 6) {  // evict two rows
        std::vector<char> keep(static_cast<size_t>(n), 1);
        keep[rng() % static_cast<size_t>(n)] = 0;
        keep[static_cast<size_t>(n - 1)] = 0;
        sums.keep_rows(keep);
        for (std::vector<double>& row : added) {
          std::vector<double> k;
          for (size_t j = 0; j < row.size(); ++j)
            if (keep[j]) k.push_back(row[j]);
          row = k;
        }
      }
      const int first = r > 0 ? std::max(0, static_cast<int>(added.size()) - r) : 0;
      for (int j = 0; j < sums.rows(); ++j) {
        double want = 0;
        for (size_t i = static_cast<size_t>(first); i < added.size(); ++i) want += added[i][static_cast<size_t>(j)];
        ASSERT_NEAR(sums.sums()[j], want, 1e-9) << "r " << r << " query " << t << " row " << j;
      }
    }
  }
}

// accumulate_attention with the step gain: each query's logits q.k / sqrt(d) times its gain
// step_gain(qpos + 1, budget), in float64, over prompt rows and lanes of mixed positions.
TEST(AhaKv, GainedSoftmaxRowsMatchFloat64) {
  const int H = 6, Hkv = 2, d = 16, S = 90, G = H / Hkv, budget = 10;
  KvCache cache(1, Hkv, d, S, 0, KvType::F32, KvType::F32);
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> k(static_cast<size_t>(Hkv * d)), v(k.size()), q(static_cast<size_t>(S) * H * d);
  for (int j = 0; j < S; ++j) {
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    cache.append(0, k.data(), v.data(), j);
  }
  for (float& x : q) x = nd(rng);
  std::vector<int32_t> pos(S);
  for (int j = 0; j < S; ++j) pos[static_cast<size_t>(j)] = j;
  ThreadPool pool(2);
  std::vector<std::vector<double>> acc;
  accumulate_attention(q.data(), pos.data(), S, cache, 0, {H, Hkv, d, 0}, acc, pool, budget);
  for (int g = 0; g < Hkv; ++g) {
    std::vector<double> want(S, 0.0);
    for (int i = 0; i < S; ++i) {
      const double gain = i + 1 > budget ? std::sqrt(std::max(2.0 * std::log((i + 1.0) / budget), 1.0)) : 1.0;
      for (int h = g * G; h < (g + 1) * G; ++h) {
        std::vector<double> x;
        for (int j = 0; j <= i; ++j)
          x.push_back(gain * test::dot64(&q[(static_cast<size_t>(i) * H + h) * d], cache.head(0, g).key(j, d), d) / std::sqrt(double(d)));
        const double m = *std::max_element(x.begin(), x.end());
        double z = 0;
        for (double& e : x) z += (e = std::exp(e - m));
        for (int j = 0; j <= i; ++j) want[static_cast<size_t>(j)] += x[static_cast<size_t>(j)] / z / G;
      }
    }
    for (int j = 0; j < S; ++j) ASSERT_NEAR(acc[static_cast<size_t>(g)][static_cast<size_t>(j)], want[static_cast<size_t>(j)], 1e-5) << g << " " << j;
  }
}

// The ahakv selector end to end on one layer: a prompt that evicts at prefill, then decode steps
// that evict one row each, against a float64 reference that keeps every query's gained softmax
// row per position, sums the last r (or all), multiplies by the pooled value norms over their
// maximum, keeps the best C - Sw prefix tokens at prefill and evicts the lowest candidate after.
// Every combination of the three parts; none of them is H2O, which must choose alike.
TEST(AhaKv, SelectorKeepsAndEvictsAsTheFormulaSays) {
  const int n_heads = 6, n_kv = 2, d = 16, G = n_heads / n_kv, S = 48, steps = 20, C = 16, Sw = 4, r = 4;
  for (int mask = 0; mask < 8; ++mask)
    for (const char* policy : {"ahakv", "h2o"}) {
      const AhaParts parts{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      if (policy == std::string("h2o") && mask != 0) continue;
      SCOPED_TRACE(std::string(policy) + " " + aha_parts_name(parts));
      KvPolicyParams p;
      p.policy = policy;
      p.budget = C;
      p.window = Sw;
      p.aha = parts;
      KvEvictor ev(p, 1, {n_heads, n_kv, d, 0});
      KvCache cache(1, n_kv, d, S + steps, 0, KvType::F32, KvType::F32);
      ThreadPool pool(2);
      std::mt19937 rng(33);
      std::normal_distribution<float> nd(0.0f, 1.5f);
      std::vector<float> k(static_cast<size_t>(n_kv * d)), v(k.size()), q(static_cast<size_t>(S * n_heads * d));
      // Reference state per KV head: held positions in order; per position, each query's row.
      std::vector<std::vector<int32_t>> held(n_kv);
      std::vector<std::map<int32_t, std::map<int32_t, double>>> rows(n_kv);  // [kvh][position][query position]
      std::map<int32_t, double> v2;                                           // [kvh * 10000 + position]
      auto add_query = [&](const float* qt, int32_t qpos) {
        const double gain = parts.gain && qpos + 1 > C ? std::sqrt(std::max(2.0 * std::log((qpos + 1.0) / C), 1.0)) : 1.0;
        for (int h = 0; h < n_heads; ++h) {
          const KvHead& kh = cache.head(0, h / G);
          std::vector<double> x;
          for (int j = 0; j < kh.n && kh.pos[static_cast<size_t>(j)] <= qpos; ++j)
            x.push_back(gain * test::dot64(qt + h * d, kh.key(j, d), d) / std::sqrt(double(d)));
          const double m = *std::max_element(x.begin(), x.end());
          double z = 0;
          for (double& e : x) z += (e = std::exp(e - m));
          for (size_t j = 0; j < x.size(); ++j) rows[static_cast<size_t>(h / G)][kh.pos[j]][qpos] += x[j] / z / G;
        }
      };
      auto scores = [&](int g, int32_t newest, int n_cand) {  // the candidates' scores, in row order
        const std::vector<int32_t>& hp = held[static_cast<size_t>(g)];
        std::vector<double> s(static_cast<size_t>(n_cand), 0.0), norms(static_cast<size_t>(n_cand));
        for (int j = 0; j < n_cand; ++j) {
          for (auto [qp, a] : rows[static_cast<size_t>(g)][hp[static_cast<size_t>(j)]])
            if (!parts.recent || qp > newest - r) s[static_cast<size_t>(j)] += a;
          norms[static_cast<size_t>(j)] = v2[g * 10000 + hp[static_cast<size_t>(j)]];
        }
        if (parts.value) {
          std::vector<double> pooled(static_cast<size_t>(n_cand));
          for (int j = 0; j < n_cand; ++j)
            for (int o = j - 2; o <= j + 2; ++o) pooled[static_cast<size_t>(j)] += o >= 0 && o < n_cand ? norms[static_cast<size_t>(o)] / 5 : 0.0;
          const double mx = *std::max_element(pooled.begin(), pooled.end());
          for (int j = 0; j < n_cand; ++j) s[static_cast<size_t>(j)] *= pooled[static_cast<size_t>(j)] / mx;
        }
        return s;
      };
      auto append = [&](int32_t at) {
        for (float& x : k) x = nd(rng);
        for (float& x : v) x = nd(rng);
        cache.append(0, k.data(), v.data(), at);
        for (int g = 0; g < n_kv; ++g) {
          held[static_cast<size_t>(g)].push_back(at);
          v2[g * 10000 + at] = test::dot64(&v[static_cast<size_t>(g * d)], &v[static_cast<size_t>(g * d)], d);
        }
      };
      // Prefill: the prompt evicts (S > C + Sw) down to C - Sw prefix tokens and the window.
      ev.begin_prompt(S);
      std::vector<int32_t> pos(S);
      for (int j = 0; j < S; ++j) {
        append(j);
        pos[static_cast<size_t>(j)] = j;
      }
      for (float& x : q) x = nd(rng);
      ev.observe(0, q.data(), pos.data(), 20, cache, pool);
      ev.observe(0, q.data() + 20 * n_heads * d, pos.data() + 20, S - 20, cache, pool);
      for (int i = 0; i < S; ++i) add_query(q.data() + static_cast<size_t>(i) * n_heads * d, i);
      ev.on_layer_done(0, cache, pool);
      ev.finish(cache);
      for (int g = 0; g < n_kv; ++g) {
        std::vector<int32_t>& hp = held[static_cast<size_t>(g)];
        const int n_cand = S - Sw;
        const std::vector<double> s = scores(g, S - 1, n_cand);
        const std::vector<char> keep = top_k_flags(s.data(), n_cand, C - Sw);
        std::vector<int32_t> kept;
        for (int j = 0; j < S; ++j)
          if (j >= n_cand || keep[static_cast<size_t>(j)]) kept.push_back(hp[static_cast<size_t>(j)]);
        hp = kept;
        const KvHead& kh = cache.head(0, g);
        ASSERT_EQ(std::vector<int32_t>(kh.pos.begin(), kh.pos.begin() + kh.n), hp) << "prefill, kv head " << g;
      }
      // Decode: one victim per head and step, the lowest-scored candidate (the first on ties).
      std::vector<float> qd(static_cast<size_t>(n_heads * d));
      for (int t = 0; t < steps; ++t) {
        const int32_t qpos = S + t;
        append(qpos);
        for (float& x : qd) x = nd(rng);
        add_query(qd.data(), qpos);
        ev.on_decode(0, qd.data(), qpos, cache, pool);
        for (int g = 0; g < n_kv; ++g) {
          std::vector<int32_t>& hp = held[static_cast<size_t>(g)];
          const int n_cand = static_cast<int>(hp.size()) - Sw;
          const std::vector<double> s = scores(g, qpos, n_cand);
          hp.erase(hp.begin() + (std::min_element(s.begin(), s.end()) - s.begin()));
          const KvHead& kh = cache.head(0, g);
          ASSERT_EQ(std::vector<int32_t>(kh.pos.begin(), kh.pos.begin() + kh.n), hp) << "step " << t << ", kv head " << g;
        }
      }
    }
}

TEST(AhaKv, PolicyAndSelectorSettings) {
  KvPolicyParams p;
  p.policy = "ahakv";
  p.budget = 64;
  EXPECT_EQ(policy_parts(p).selector, KvSelector::AhaKv);
  EXPECT_EQ(policy_parts(p).allocator, KvAllocator::Uniform);
  p.policy = "cake";
  p.selector = "ahakv";  // CAKE's cascade with AhaKV's token scores
  EXPECT_EQ(policy_parts(p).selector, KvSelector::AhaKv);
  EXPECT_EQ(policy_parts(p).allocator, KvAllocator::Cake);
  EXPECT_TRUE(accumulates(p));
  EXPECT_NO_THROW(validate(p));
  p.prefill_chunk = 128;  // chunks score by their last queries: fine with the recent part
  EXPECT_NO_THROW(validate(p));
  p.aha.recent = false;
  EXPECT_THROW(validate(p), Error);
  p.prefill_chunk = 0;
  p.selector = "bogus";
  EXPECT_THROW(validate(p), Error);
  p.selector = "ahakv";
  p.policy = "streaming";
  EXPECT_THROW(validate(p), Error);
  KvPolicyParams a = p, b = p;
  b.aha.value = !b.aha.value;
  EXPECT_NE(a, b);
}

// What the selector holds per row and KV head beyond the cache: h2o's double sums; AhaKV's, a
// value norm and a ring of r = Sobs (or the window) fp32 rows; nothing for the window policies.
TEST(AhaKv, SelectorRowBytes) {
  KvPolicyParams p;
  p.budget = 64;
  p.window = 32;
  p.policy = "h2o";
  EXPECT_EQ(KvEvictor::selector_row_bytes(p), 8u);
  p.policy = "ahakv";
  EXPECT_EQ(KvEvictor::selector_row_bytes(p), 8u + 4u + 32u * 4u);
  p.observe = 8;
  EXPECT_EQ(KvEvictor::selector_row_bytes(p), 8u + 4u + 8u * 4u);
  p.aha = parse_aha_parts("gain");
  EXPECT_EQ(KvEvictor::selector_row_bytes(p), 8u);
  p.policy = "cake";
  EXPECT_EQ(KvEvictor::selector_row_bytes(p), 0u);
  p.budget = 0;
  p.policy = "ahakv";
  EXPECT_EQ(KvEvictor::selector_row_bytes(p), 0u);  // nothing evicted: nothing kept
}

// --kv-sweep's and the records' spelling of a setting, both ways.
TEST(AhaKv, PolicyLabelsRoundTrip) {
  for (const char* label : {"cake", "h2o", "ahakv", "ahakv:recent+value", "ahakv:none", "cake@ahakv", "slake@ahakv:gain"}) {
    const KvPolicyParams p = with_policy_label({}, label);
    EXPECT_EQ(kv_policy_label(p), label);
  }
  EXPECT_EQ(with_policy_label({}, "pyramidkv@ahakv:value").aha, (AhaParts{false, false, true}));
  EXPECT_EQ(kv_policy_label(with_policy_label({}, "ahakv:gain+recent+value")), "ahakv");  // the default parts
  EXPECT_THROW(with_policy_label({}, "cake:gain"), Error);  // AhaKV does not score there
  EXPECT_THROW(with_policy_label({}, "ahakv:bias"), Error);
}

}  // namespace
}  // namespace slake
