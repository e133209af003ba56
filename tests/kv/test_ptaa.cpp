// PTAA and the linear cache against float64 brute force (algorithm.md §3, §4 and §7).
#include <cmath>
#include <random>

#include "reference_math.h"
#include "slake/kv/ptaa.h"
#include "test_util.h"

namespace slake {
namespace {

struct Tokens {
  std::vector<std::vector<float>> k, v;
};

Tokens random_tokens(int n, int d, float key_scale, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tokens t;
  for (int i = 0; i < n; ++i) {
    std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
    for (auto& x : k) x = key_scale * nd(rng);
    for (auto& x : v) x = nd(rng);
    t.k.push_back(k);
    t.v.push_back(v);
  }
  return t;
}

// A one-head cache holding `kept` at positions given by `pos`.
KvCache one_head_cache(const Tokens& kept, const std::vector<int32_t>& pos, int d) {
  KvCache c(1, 1, d, static_cast<int>(kept.k.size()) + 1);
  for (size_t i = 0; i < kept.k.size(); ++i) c.append(0, kept.k[i].data(), kept.v[i].data(), pos[i]);
  return c;
}

void expect_close(const float* got, const std::vector<double>& want, double tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << "dim " << i;
  }
}

TEST(Ptaa, EqualsSoftmaxWhenNothingIsEvicted) {
  std::mt19937 rng(1);
  for (int d : {8, 64}) {
    const Tokens kept = random_tokens(37, d, 1.0f, rng);
    std::vector<int32_t> pos(37);
    for (int i = 0; i < 37; ++i) pos[static_cast<size_t>(i)] = 2 * i;
    const KvCache c = one_head_cache(kept, pos, d);
    const Tokens q = random_tokens(1, d, 1.0f, rng);
    std::vector<float> out(static_cast<size_t>(d));
    for (int window : {0, 10}) {
      for (int32_t qpos : {72, 40}) {
        ptaa_one(out.data(), q.k[0].data(), qpos, c.head(0, 0), LinearState(d), d, window);
        expect_close(out.data(), test::softmax_attention(q.k[0].data(), qpos, c.head(0, 0), d, window), 1e-5);
      }
    }
  }
}

TEST(Ptaa, EqualsTheTaylorFormulaWithEvictedTokens) {
  std::mt19937 rng(2);
  const int d = 16;
  for (int n_kept : {0, 1, 20}) {
    const Tokens kept = random_tokens(n_kept, d, 0.7f, rng);
    const Tokens evicted = random_tokens(50, d, 0.3f, rng);
    std::vector<int32_t> pos(static_cast<size_t>(n_kept));
    for (int i = 0; i < n_kept; ++i) pos[static_cast<size_t>(i)] = 100 + i;
    const KvCache c = one_head_cache(kept, pos, d);
    LinearState lin(d);
    for (size_t i = 0; i < evicted.k.size(); ++i) lin.absorb(evicted.k[i].data(), evicted.v[i].data());
    const Tokens q = random_tokens(1, d, 1.0f, rng);
    std::vector<float> out(static_cast<size_t>(d));
    ptaa_one(out.data(), q.k[0].data(), 200, c.head(0, 0), lin, d, 0);
    expect_close(out.data(), test::taylor_attention(q.k[0].data(), 200, c.head(0, 0), evicted.k, evicted.v, d), 1e-4);
  }
}

// Soft-capped logits (Gemma 2): the kept tokens weigh exp(f(x)), f(x) = cap tanh(x / cap), and the
// evicted ones exp(f(x̄)) (1 + f'(x̄) (x - x̄)) around their mean raw logit x̄, token by token in
// float64; with nothing evicted, the capped softmax itself. The cap bites: the same output
// without it is far off.
TEST(Ptaa, SoftCappedTaylorIsTheChainRuleExpansionTokenByToken) {
  std::mt19937 rng(12);
  const int d = 16;
  const double cap = 1.5;
  for (int n_ev : {0, 50}) {
    const Tokens kept = random_tokens(20, d, 1.0f, rng), evicted = random_tokens(n_ev, d, 0.6f, rng);
    std::vector<int32_t> pos(20);
    for (int i = 0; i < 20; ++i) pos[static_cast<size_t>(i)] = 100 + i;
    const KvCache c = one_head_cache(kept, pos, d);
    LinearState lin(d);
    for (int i = 0; i < n_ev; ++i) lin.absorb(evicted.k[static_cast<size_t>(i)].data(), evicted.v[static_cast<size_t>(i)].data());
    const Tokens q = random_tokens(1, d, 2.0f, rng);
    auto raw = [&](const std::vector<float>& k) { return test::dot64(q.k[0].data(), k.data(), d) / std::sqrt(static_cast<double>(d)); };
    auto f = [&](double x) { return cap * std::tanh(x / cap); };
    double xbar = 0;
    for (const auto& k : evicted.k) xbar += raw(k) / n_ev;
    const double slope = 1.0 - std::tanh(xbar / cap) * std::tanh(xbar / cap);
    std::vector<double> w;
    std::vector<const std::vector<float>*> vals;
    for (int i = 0; i < 20; ++i) w.push_back(std::exp(f(raw(kept.k[static_cast<size_t>(i)])))), vals.push_back(&kept.v[static_cast<size_t>(i)]);
    for (int i = 0; i < n_ev; ++i)
      w.push_back(std::exp(f(xbar)) * (1.0 + slope * (raw(evicted.k[static_cast<size_t>(i)]) - xbar))), vals.push_back(&evicted.v[static_cast<size_t>(i)]);
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    double z = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      z += w[j];
      for (int i = 0; i < d; ++i) want[static_cast<size_t>(i)] += w[j] * (*vals[j])[static_cast<size_t>(i)];
    }
    for (double& o : want) o /= z;
    std::vector<float> out(static_cast<size_t>(d)), uncapped(static_cast<size_t>(d));
    ptaa_one(out.data(), q.k[0].data(), 200, c.head(0, 0), lin, d, 0, static_cast<float>(cap));
    expect_close(out.data(), want, 1e-4);
    ptaa_one(uncapped.data(), q.k[0].data(), 200, c.head(0, 0), lin, d, 0);
    double far = 0;
    for (int i = 0; i < d; ++i) far = std::max(far, std::abs(uncapped[static_cast<size_t>(i)] - want[static_cast<size_t>(i)]));
    EXPECT_GT(far, 1e-2) << "the cap does not bite";
  }
}

TEST(Ptaa, StableWhenEvictedKeysScoreFarHigher) {
  std::mt19937 rng(3);
  const int d = 32;
  const Tokens kept = random_tokens(10, d, 0.1f, rng);
  Tokens evicted = random_tokens(40, d, 0.0f, rng);
  const Tokens q = random_tokens(1, d, 1.0f, rng);
  // Evicted keys aligned with the query: scores around 90 (exp(90) overflows fp32).
  std::normal_distribution<float> jitter(0.0f, 0.02f);
  double qq = 0;
  for (float x : q.k[0]) qq += x * x;
  for (auto& k : evicted.k)
    for (int i = 0; i < d; ++i) k[static_cast<size_t>(i)] = static_cast<float>(q.k[0][static_cast<size_t>(i)] * 90.0 * std::sqrt(d) / qq) + jitter(rng);
  std::vector<int32_t> pos(10);
  for (int i = 0; i < 10; ++i) pos[static_cast<size_t>(i)] = i;
  const KvCache c = one_head_cache(kept, pos, d);
  LinearState lin(d);
  for (size_t i = 0; i < evicted.k.size(); ++i) lin.absorb(evicted.k[i].data(), evicted.v[i].data());
  std::vector<float> out(static_cast<size_t>(d));
  ptaa_one(out.data(), q.k[0].data(), 50, c.head(0, 0), lin, d, 0);
  expect_close(out.data(), test::taylor_attention(q.k[0].data(), 50, c.head(0, 0), evicted.k, evicted.v, d), 1e-3);
}

// Float64 reference of the centroid state: tokens join, in order, the first empty centroid or the
// one with the nearest mean key; the query then attends the kept keys and each centroid as a token
// of weight count at the mean key and value.
std::vector<double> centroid_attention(const float* q, const KvHead& kept, const Tokens& evicted, int K, int d) {
  std::vector<double> cn(static_cast<size_t>(K), 0.0);
  std::vector<std::vector<double>> ck(static_cast<size_t>(K), std::vector<double>(static_cast<size_t>(d), 0.0)), cv = ck;
  for (size_t t = 0; t < evicted.k.size(); ++t) {
    size_t best = 0;
    double best_dist = INFINITY;
    for (size_t c = 0; c < cn.size(); ++c) {
      if (cn[c] == 0) {
        best = c;
        break;
      }
      double dist = 0;
      for (int i = 0; i < d; ++i) dist += std::pow(ck[c][static_cast<size_t>(i)] / cn[c] - evicted.k[t][static_cast<size_t>(i)], 2);
      if (dist < best_dist) best_dist = dist, best = c;
    }
    cn[best] += 1;
    for (int i = 0; i < d; ++i) ck[best][static_cast<size_t>(i)] += evicted.k[t][static_cast<size_t>(i)], cv[best][static_cast<size_t>(i)] += evicted.v[t][static_cast<size_t>(i)];
  }
  std::vector<double> x, w;
  std::vector<std::vector<double>> vals;
  for (int j = 0; j < kept.n; ++j) {
    x.push_back(test::dot64(q, kept.key(j, d), d) / std::sqrt(double(d)));
    w.push_back(1.0);
    vals.emplace_back(kept.value(j, d), kept.value(j, d) + d);
  }
  for (size_t c = 0; c < cn.size(); ++c) {
    if (cn[c] == 0) continue;
    double s = 0;
    for (int i = 0; i < d; ++i) s += q[i] * ck[c][static_cast<size_t>(i)] / cn[c];
    x.push_back(s / std::sqrt(double(d)));
    w.push_back(cn[c]);
    std::vector<double> mean(static_cast<size_t>(d));
    for (int i = 0; i < d; ++i) mean[static_cast<size_t>(i)] = cv[c][static_cast<size_t>(i)] / cn[c];
    vals.push_back(mean);
  }
  const double m = *std::max_element(x.begin(), x.end());
  std::vector<double> out(static_cast<size_t>(d), 0.0);
  double z = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double e = w[j] * std::exp(x[j] - m);
    z += e;
    for (int i = 0; i < d; ++i) out[static_cast<size_t>(i)] += e * vals[j][static_cast<size_t>(i)];
  }
  for (double& o : out) o /= z;
  return out;
}

// With a centroid per evicted token, nothing is merged: exact softmax over every token.
TEST(Ptaa, CentroidsWithRoomForEveryTokenAreExactAttention) {
  std::mt19937 rng(5);
  const int d = 16, n_kept = 12, n_ev = 30;
  const Tokens kept = random_tokens(n_kept, d, 1.0f, rng), evicted = random_tokens(n_ev, d, 1.0f, rng);
  std::vector<int32_t> pos(static_cast<size_t>(n_kept));
  for (int i = 0; i < n_kept; ++i) pos[static_cast<size_t>(i)] = n_ev + i;
  const KvCache c = one_head_cache(kept, pos, d);
  Tokens all = kept;
  all.k.insert(all.k.end(), evicted.k.begin(), evicted.k.end());
  all.v.insert(all.v.end(), evicted.v.begin(), evicted.v.end());
  std::vector<int32_t> all_pos(all.k.size(), 0);
  const KvCache every = one_head_cache(all, all_pos, d);
  for (int K : {n_ev, n_ev + 5}) {
    LinearState lin(d, K);
    for (int i = 0; i < n_ev; ++i) lin.absorb(evicted.k[static_cast<size_t>(i)].data(), evicted.v[static_cast<size_t>(i)].data());
    const Tokens q = random_tokens(1, d, 1.0f, rng);
    std::vector<float> out(static_cast<size_t>(d));
    ptaa_one(out.data(), q.k[0].data(), n_ev + n_kept, c.head(0, 0), lin, d, 0);
    expect_close(out.data(), test::softmax_attention(q.k[0].data(), 0, every.head(0, 0), d, 0), 1e-5);
  }
}

TEST(Ptaa, CentroidsEqualTheirFormula) {
  std::mt19937 rng(6);
  const int d = 16;
  for (int n_kept : {0, 1, 20}) {
    for (int K : {1, 4, 9}) {
      const Tokens kept = random_tokens(n_kept, d, 0.7f, rng);
      const Tokens evicted = random_tokens(80, d, 1.0f, rng);
      std::vector<int32_t> pos(static_cast<size_t>(n_kept));
      for (int i = 0; i < n_kept; ++i) pos[static_cast<size_t>(i)] = 100 + i;
      const KvCache c = one_head_cache(kept, pos, d);
      LinearState lin(d, K);
      lin.absorb_batch(evicted.k[0].data(), evicted.v[0].data(), 1, d);
      for (size_t i = 1; i < evicted.k.size(); ++i) lin.absorb(evicted.k[i].data(), evicted.v[i].data());
      const Tokens q = random_tokens(1, d, 2.0f, rng);
      std::vector<float> out(static_cast<size_t>(d));
      ptaa_one(out.data(), q.k[0].data(), 200, c.head(0, 0), lin, d, 0);
      expect_close(out.data(), centroid_attention(q.k[0].data(), c.head(0, 0), evicted, K, d), 1e-4);
      EXPECT_EQ(lin.n, 80.0f);
    }
  }
  EXPECT_EQ(LinearState(d, 32).bytes(), (32 * (2 * d + 1) + 1) * sizeof(float));
}

TEST(LinearState, IncrementalEqualsBatchAbsorption) {
  std::mt19937 rng(4);
  const int d = 24, n = 300;
  const Tokens t = random_tokens(n, d, 1.0f, rng);
  std::vector<float> kk, vv;
  for (int i = 0; i < n; ++i) {
    kk.insert(kk.end(), t.k[static_cast<size_t>(i)].begin(), t.k[static_cast<size_t>(i)].end());
    vv.insert(vv.end(), t.v[static_cast<size_t>(i)].begin(), t.v[static_cast<size_t>(i)].end());
  }
  LinearState one(d), batch(d), mixed(d);
  for (int i = 0; i < n; ++i) one.absorb(t.k[static_cast<size_t>(i)].data(), t.v[static_cast<size_t>(i)].data());
  batch.absorb_batch(kk.data(), vv.data(), n, d);
  mixed.absorb_batch(kk.data(), vv.data(), 100, d);
  for (int i = 100; i < n; ++i) mixed.absorb(t.k[static_cast<size_t>(i)].data(), t.v[static_cast<size_t>(i)].data());
  // Float64 truth for M.
  for (const LinearState* s : {&one, &batch, &mixed}) {
    EXPECT_EQ(s->n, static_cast<float>(n));
    for (int i = 0; i < d; ++i) {
      double ks = 0;
      for (int j = 0; j < n; ++j) ks += t.k[static_cast<size_t>(j)][static_cast<size_t>(i)];
      ASSERT_NEAR(s->ksum[static_cast<size_t>(i)], ks, 1e-3);
      for (int jj = 0; jj < d; ++jj) {
        double m = 0;
        for (int j = 0; j < n; ++j) m += static_cast<double>(t.k[static_cast<size_t>(j)][static_cast<size_t>(i)]) * t.v[static_cast<size_t>(j)][static_cast<size_t>(jj)];
        ASSERT_NEAR(s->M[static_cast<size_t>(i * d + jj)], m, 1e-3);
      }
    }
  }
  EXPECT_EQ(LinearState(d).bytes(), (d * d + 2 * d + 1) * sizeof(float));
  // Centroid states: the same assignment token by token or in batches.
  LinearState c_one(d, 7), c_batch(d, 7), c_mixed(d, 7);
  for (int i = 0; i < n; ++i) c_one.absorb(t.k[static_cast<size_t>(i)].data(), t.v[static_cast<size_t>(i)].data());
  c_batch.absorb_batch(kk.data(), vv.data(), n, d);
  c_mixed.absorb_batch(kk.data(), vv.data(), 100, d);
  for (int i = 100; i < n; ++i) c_mixed.absorb(t.k[static_cast<size_t>(i)].data(), t.v[static_cast<size_t>(i)].data());
  for (const LinearState* s : {&c_batch, &c_mixed}) {
    EXPECT_EQ(s->n, static_cast<float>(n));
    EXPECT_EQ(s->cn, c_one.cn);
    EXPECT_EQ(s->ck, c_one.ck);
    EXPECT_EQ(s->cv, c_one.cv);
  }
  double counted = 0;
  for (float x : c_one.cn) counted += x;
  EXPECT_EQ(counted, n);
}

}  // namespace
}  // namespace slake
