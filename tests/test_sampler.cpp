// The sampler against a brute-force float64 reference written here from llama.cpp's definitions
// (penalties, top-k, top-p, min-p on the temperature-1 softmax, temperature last), plus the draw:
// seeded reproducibility and empirical frequencies.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "slake/error.h"
#include "slake/sampler.h"
#include "test_util.h"

namespace slake {
namespace {

// ---- Reference: one step at a time over explicit (id, logit) lists, normalising at every step.

struct Ref {
  std::vector<int32_t> ids;
  std::vector<double> logits;
};

std::vector<double> softmax(const std::vector<double>& x, double temp = 1.0) {
  double m = -INFINITY;
  for (double v : x) m = std::max(m, v);
  std::vector<double> p;
  double z = 0;
  for (double v : x) {
    p.push_back(std::exp((v - m) / temp));
    z += p.back();
  }
  for (double& v : p) v /= z;
  return p;
}

// Sorted by logit (descending), ties by id, then filtered by the steps in llama.cpp's order.
TokenProbs reference(const SamplerParams& sp, const std::vector<float>& logits, const std::vector<int32_t>& recent,
                     double xtc_roll = 2.0) {
  std::vector<double> l(logits.begin(), logits.end());
  if (sp.repeat_last_n != 0) {
    const size_t from = sp.repeat_last_n < 0 || static_cast<size_t>(sp.repeat_last_n) >= recent.size()
                            ? 0
                            : recent.size() - static_cast<size_t>(sp.repeat_last_n);
    const std::set<int32_t> penalised(recent.begin() + static_cast<std::ptrdiff_t>(from), recent.end());
    for (int32_t t : penalised) {
      l[t] = l[t] > 0 ? l[t] / sp.repeat_penalty : l[t] * sp.repeat_penalty;
      // llama.cpp's penalties: frequency x occurrences + presence, on the same window.
      const auto n = std::count(recent.begin() + static_cast<std::ptrdiff_t>(from), recent.end(), t);
      l[t] -= static_cast<double>(n) * sp.frequency_penalty + sp.presence_penalty;
    }
  }
  std::vector<int32_t> order(l.size());
  for (size_t i = 0; i < l.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  if (sp.temp <= 0) return {{order[0]}, {1.0}};

  Ref r;
  for (int32_t id : order) {
    r.ids.push_back(id);
    r.logits.push_back(l[id]);
  }
  auto keep = [&r](size_t n) {
    r.ids.resize(n);
    r.logits.resize(n);
  };
  if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < r.ids.size()) keep(static_cast<size_t>(sp.top_k));
  if (sp.typical_p < 1.0f) {
    // Locally typical: by |surprise - entropy|, until the probability passes p; then back in logit order.
    const std::vector<double> p = softmax(r.logits);
    double h = 0;
    for (double q : p) h -= q * std::log(q);
    std::vector<size_t> idx(p.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      return std::fabs(-std::log(p[a]) - h) < std::fabs(-std::log(p[b]) - h);
    });
    double cum = 0;
    size_t n = 0;
    while (n < idx.size() && cum <= sp.typical_p) cum += p[idx[n++]];
    std::vector<size_t> kept(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n));
    std::sort(kept.begin(), kept.end());  // r is in logit order already
    Ref t;
    for (size_t i : kept) t.ids.push_back(r.ids[i]), t.logits.push_back(r.logits[i]);
    r = t;
  }
  if (sp.top_p < 1.0f) {
    const std::vector<double> p = softmax(r.logits);
    double cum = 0;
    size_t n = 0;
    while (n < p.size() && cum < sp.top_p) cum += p[n++];
    keep(n);
  }
  if (sp.min_p > 0.0f) {
    const std::vector<double> p = softmax(r.logits);
    size_t n = 0;
    while (n < p.size() && p[n] >= sp.min_p * p[0]) ++n;
    keep(n);
  }
  if (xtc_roll <= sp.xtc_probability && sp.xtc_threshold <= 0.5f && r.ids.size() >= 2) {
    // Every token at or above the threshold but the least probable of them.
    const std::vector<double> p = softmax(r.logits);
    size_t above = 0;
    while (above < p.size() && p[above] >= sp.xtc_threshold) ++above;
    if (above >= 2) {
      r.ids.erase(r.ids.begin(), r.ids.begin() + static_cast<std::ptrdiff_t>(above - 1));
      r.logits.erase(r.logits.begin(), r.logits.begin() + static_cast<std::ptrdiff_t>(above - 1));
    }
  }
  return {r.ids, softmax(r.logits, sp.temp)};
}

std::vector<float> random_logits(int n, uint32_t seed, double scale = 3.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, static_cast<float>(scale));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

SamplerParams off() {  // every filter off, temperature 1
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

void expect_same(const TokenProbs& got, const TokenProbs& want) {
  ASSERT_EQ(got.ids, want.ids);
  ASSERT_EQ(got.probs.size(), want.probs.size());
  for (size_t i = 0; i < got.probs.size(); ++i) EXPECT_NEAR(got.probs[i], want.probs[i], 1e-12) << "candidate " << i;
}

void check_against_reference(const SamplerParams& sp, int n_vocab, const std::vector<int32_t>& recent = {}) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> l = random_logits(n_vocab, seed);
    SCOPED_TRACE("logit seed " + std::to_string(seed));
    expect_same(candidate_distribution(sp, l.data(), n_vocab, recent), reference(sp, l, recent));
  }
}

TEST(Sampler, TemperatureAloneIsTheScaledSoftmax) {
  for (float t : {0.3f, 1.0f, 2.5f}) {
    SamplerParams sp = off();
    sp.temp = t;
    check_against_reference(sp, 300);
  }
}

TEST(Sampler, TopKKeepsTheKLargest) {
  for (int k : {1, 5, 40, 299, 300, 1000}) {
    SamplerParams sp = off();
    sp.top_k = k;
    check_against_reference(sp, 300);
    const std::vector<float> l = random_logits(300, 7);
    EXPECT_EQ(candidate_distribution(sp, l.data(), 300, {}).ids.size(), static_cast<size_t>(std::min(k, 300)));
  }
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  for (float p : {0.05f, 0.5f, 0.9f, 0.999f}) {
    SamplerParams sp = off();
    sp.top_p = p;
    check_against_reference(sp, 300);
  }
}

TEST(Sampler, MinPKeepsTokensAboveAFractionOfTheBest) {
  for (float p : {0.01f, 0.1f, 0.5f, 1.0f}) {
    SamplerParams sp = off();
    sp.min_p = p;
    check_against_reference(sp, 300);
  }
}

TEST(Sampler, FiltersUseTheTemperatureOneSoftmax) {
  // Logits 0, -1, -2: at temperature 1, min-p 0.3 keeps exp(-1) = 0.37 but drops exp(-2) = 0.14.
  // Were min-p applied after a temperature of 4, all three would pass (exp(-0.5) = 0.61).
  const std::vector<float> l{0.0f, -1.0f, -2.0f};
  SamplerParams sp = off();
  sp.min_p = 0.3f;
  sp.temp = 4.0f;
  const TokenProbs d = candidate_distribution(sp, l.data(), 3, {});
  EXPECT_EQ(d.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(d.probs[0], 1.0 / (1.0 + std::exp(-0.25)), 1e-12);
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 1.0f};
  SamplerParams sp = off();
  sp.repeat_penalty = 2.0f;
  sp.repeat_last_n = 3;
  // Token 3 fell out of the last 3; token 0 is repeated but penalised once.
  const std::vector<int32_t> recent{3, 0, 1, 0};
  const TokenProbs d = candidate_distribution(sp, l.data(), 4, recent);
  // Penalised logits: 1, -2, 0.5, 1 -> order 0, 3 (tie, lower id first), 2, 1.
  EXPECT_EQ(d.ids, (std::vector<int32_t>{0, 3, 2, 1}));
  const std::vector<double> want = softmax({1.0, 1.0, 0.5, -2.0});
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(d.probs[i], want[i], 1e-12);

  for (int last_n : {-1, 0, 1, 5, 64}) {
    SamplerParams p = off();
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = last_n;
    check_against_reference(p, 100, {5, 9, 9, 17, 3, 42, 99, 5, 0});
  }
}

TEST(Sampler, FrequencyAndPresencePenaltiesSubtractPerOccurrenceAndOnce) {
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 1.0f};
  SamplerParams sp = off();
  sp.frequency_penalty = 0.5f;
  sp.presence_penalty = 0.25f;
  sp.repeat_last_n = 3;
  // Token 0 twice and token 1 once in the last 3: 2 - 2 x 0.5 - 0.25, -1 - 0.5 - 0.25.
  const TokenProbs d = candidate_distribution(sp, l.data(), 4, {3, 0, 1, 0});
  EXPECT_EQ(d.ids, (std::vector<int32_t>{3, 0, 2, 1}));
  const std::vector<double> want = softmax({1.0, 0.75, 0.5, -1.75});
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(d.probs[i], want[i], 1e-6);
  for (float f : {-2.0f, 0.3f, 2.0f}) {
    SamplerParams p = off();
    p.frequency_penalty = f;
    p.presence_penalty = -f / 2;
    p.repeat_penalty = 1.2f;
    check_against_reference(p, 100, {5, 9, 9, 17, 3, 42, 99, 5, 0, 9});
  }
  SamplerParams bad = off();
  bad.presence_penalty = 2.5f;
  EXPECT_THROW(validate(bad), Error);
}

TEST(Sampler, TypicalKeepsTheTokensNearestTheEntropy) {
  // p = softmax(2, 1.5, 1.5, 1.5, 1.5) = 0.292, 0.177 x 4: the entropy is 1.59 nats, and the
  // surprise of the others (1.73) is nearer to it than the first's (1.23): two of them make 0.3.
  const std::vector<float> l{2.0f, 1.5f, 1.5f, 1.5f, 1.5f};
  SamplerParams sp = off();
  sp.typical_p = 0.3f;
  const TokenProbs d = candidate_distribution(sp, l.data(), 5, {});
  EXPECT_EQ(d.ids, (std::vector<int32_t>{1, 2}));
  for (float t : {0.2f, 0.5f, 0.9f, 0.99f}) {
    SamplerParams p = off();
    p.typical_p = t;
    check_against_reference(p, 200);
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.02f;
    check_against_reference(p, 200);
  }
}

TEST(Sampler, XtcDropsTheTopChoicesButTheLeastOfThem) {
  SamplerParams sp = off();
  sp.xtc_probability = 0.5f;
  sp.xtc_threshold = 0.1f;
  // p = softmax(2, 1.8, 1.5, -3): 0.40, 0.33, 0.24, 0.003: the first two go.
  const std::vector<float> l{2.0f, 1.8f, 1.5f, -3.0f};
  EXPECT_EQ(candidate_distribution(sp, l.data(), 4, {}, 0.4).ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(candidate_distribution(sp, l.data(), 4, {}, 0.6).ids.size(), 4u);  // the roll says no
  for (float thr : {0.02f, 0.05f, 0.2f}) {
    SamplerParams p = off();
    p.xtc_probability = 1.0f;
    p.xtc_threshold = thr;
    p.min_p = 0.01f;
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const std::vector<float> x = random_logits(100, seed, 1.5);
      expect_same(candidate_distribution(p, x.data(), 100, {}, 0.3), reference(p, x, {}, 0.3));
    }
  }
}

TEST(Sampler, MirostatTruncatesBySurpriseAndTracksTau) {
  SamplerParams sp = off();
  sp.mirostat = 2;
  sp.mirostat_tau = 3.0f;
  sp.mirostat_eta = 0.1f;
  sp.temp = 0.8f;
  sp.seed = 5;
  Sampler s(sp);
  EXPECT_DOUBLE_EQ(s.mirostat_mu(), 6.0);
  for (uint32_t step = 1; step <= 30; ++step) {
    const std::vector<float> l = random_logits(300, step);
    const double mu = s.mirostat_mu();
    // Brute force: softmax at the temperature, the tokens with -log2 p <= mu, renormalised.
    std::vector<double> x(l.begin(), l.end());
    const std::vector<double> p = softmax(x, sp.temp);
    std::vector<int32_t> order(300);
    for (int32_t i = 0; i < 300; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    size_t n = 1;
    while (n < order.size() && -std::log2(p[order[n]]) <= mu) ++n;
    double kept = 0;
    for (size_t i = 0; i < n; ++i) kept += p[order[i]];
    const TokenProbs d = mirostat_distribution(sp, l.data(), 300, mu);
    ASSERT_EQ(d.ids, std::vector<int32_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n)));
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(d.probs[i], p[order[i]] / kept, 1e-9);
    const int32_t t = s.sample(l.data(), 300);
    const size_t at = static_cast<size_t>(std::find(d.ids.begin(), d.ids.end(), t) - d.ids.begin());
    ASSERT_LT(at, n);
    EXPECT_NEAR(s.mirostat_mu(), mu - double(sp.mirostat_eta) * (-std::log2(d.probs[at]) - double(sp.mirostat_tau)), 1e-9);
  }
  SamplerParams v1 = off();
  v1.mirostat = 1;
  EXPECT_THROW(validate(v1), Error);
}

// DRY against its definition, computed naively: for every earlier place the newest tokens repeat
// (up to the newest breaker), the token that came next there loses multiplier x base^(length -
// allowed), the longest repetition counting.
TEST(Sampler, DryPenalisesTheTokenThatWouldExtendARepetition) {
  // "a b c x a b c y a b c": after "a b c" came x and y; a b c is 3 long, allowed 2: one step past.
  SamplerParams sp = off();
  sp.dry_multiplier = 0.8f;
  sp.dry_base = 1.75f;
  sp.dry_allowed_length = 2;
  const std::vector<int32_t> seq{0, 1, 2, 7, 0, 1, 2, 8, 0, 1, 2};
  std::vector<double> l(10, 0.0);
  apply_dry(sp, seq, {}, l);
  EXPECT_NEAR(l[7], -double(sp.dry_multiplier) * 1.75, 1e-12);
  EXPECT_NEAR(l[8], -double(sp.dry_multiplier) * 1.75, 1e-12);
  EXPECT_EQ(l[3], 0.0);
  std::vector<double> b(10, 0.0);
  apply_dry(sp, seq, {8}, b);  // a breaker is never penalised
  EXPECT_EQ(b[8], 0.0);
  std::vector<double> c(10, 0.0);
  apply_dry(sp, seq, {1}, c);  // the newest breaker (1, two back) limits repetitions to 1 token
  EXPECT_EQ(c, std::vector<double>(10, 0.0));

  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    SamplerParams p = off();
    p.dry_multiplier = 0.5f + static_cast<float>(rng() % 10) / 10;
    p.dry_base = 1.1f + static_cast<float>(rng() % 10) / 10;
    p.dry_allowed_length = static_cast<int>(rng() % 4);
    p.dry_penalty_last_n = rng() % 3 == 0 ? -1 : static_cast<int>(rng() % 60);
    std::vector<int32_t> seq(1 + rng() % 80);
    for (int32_t& t : seq) t = static_cast<int32_t>(rng() % 4);  // four tokens: many repeats
    std::unordered_set<int32_t> breakers;
    if (rng() % 2) breakers.insert(static_cast<int32_t>(rng() % 6));
    std::vector<double> got(6, 0.0), want(6, 0.0);
    apply_dry(p, seq, breakers, got);
    // The definition.
    const size_t n = p.dry_penalty_last_n < 0 ? seq.size() : std::min(seq.size(), static_cast<size_t>(p.dry_penalty_last_n));
    if (p.dry_penalty_last_n != 0 && n > static_cast<size_t>(p.dry_allowed_length)) {
      std::vector<int32_t> r(seq.rbegin(), seq.rbegin() + static_cast<std::ptrdiff_t>(n));
      size_t limit = n;
      for (size_t i = 0; i < n; ++i)
        if (breakers.count(r[i])) {
          limit = i;
          break;
        }
      std::map<int32_t, size_t> best;
      if (limit >= static_cast<size_t>(p.dry_allowed_length))
        for (size_t k = 1; k < n; ++k) {
          size_t len = 0;
          while (k + len < n && r[len] == r[k + len]) ++len;
          len = std::min(len, limit);
          if (len >= static_cast<size_t>(p.dry_allowed_length)) best[r[k - 1]] = std::max(best[r[k - 1]], len);
        }
      for (const auto& [t, len] : best)
        if (!breakers.count(t)) want[static_cast<size_t>(t)] -= p.dry_multiplier * std::pow(double(p.dry_base), double(len) - p.dry_allowed_length);
    }
    for (size_t t = 0; t < 6; ++t) ASSERT_NEAR(got[t], want[t], 1e-9 * (1 + std::fabs(want[t]))) << "trial " << trial << " token " << t;
  }
}

TEST(Sampler, AllStepsTogether) {
  SamplerParams sp;  // the CLI's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05
  sp.repeat_penalty = 1.1f;
  check_against_reference(sp, 1000, {1, 2, 3, 500, 999});
  sp.top_k = 0;
  sp.top_p = 0.7f;
  sp.min_p = 0.2f;
  sp.temp = 1.7f;
  check_against_reference(sp, 1000, {1, 2, 3, 500, 999});
}

TEST(Sampler, GreedyIsTheArgmaxOfThePenalisedLogits) {
  for (float t : {0.0f, -1.0f}) {
    SamplerParams sp;
    sp.temp = t;
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const std::vector<float> l = random_logits(500, seed);
      const int32_t best = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      const TokenProbs d = candidate_distribution(sp, l.data(), 500, {});
      EXPECT_EQ(d.ids, std::vector<int32_t>{best});
      Sampler s(sp);
      EXPECT_EQ(s.sample(l.data(), 500), best);
    }
  }
  const std::vector<float> l{3.0f, 2.0f, 1.0f};
  SamplerParams sp;
  sp.temp = 0;
  sp.repeat_penalty = 2.0f;
  Sampler s(sp);
  s.accept(0);
  EXPECT_EQ(s.sample(l.data(), 3), 1);  // 3 / 2 < 2
}

TEST(Sampler, AcceptKeepsOnlyTheLastNTokens) {
  const std::vector<float> l{1.0f, 1.0f, 1.0f, 1.0f, 0.9f};
  SamplerParams sp;
  sp.temp = 0;
  sp.repeat_penalty = 100.0f;
  sp.repeat_last_n = 3;
  Sampler s(sp);
  for (int round = 0; round < 10; ++round)  // many times over, so the trimming runs
    for (int32_t t : {0, 1, 2, 3}) s.accept(t);
  // The last three are 1, 2, 3: token 0 is free again and wins.
  EXPECT_EQ(s.sample(l.data(), 5), 0);
  s.accept(0);  // now 2, 3, 0: token 1 wins
  EXPECT_EQ(s.sample(l.data(), 5), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  SamplerParams sp;
  sp.top_k = 0;
  sp.min_p = 0.0f;
  sp.temp = 1.5f;
  const std::vector<float> l = random_logits(200, 3, 1.0);
  auto run = [&](uint64_t seed) {
    sp.seed = seed;
    Sampler s(sp);
    std::vector<int32_t> out;
    for (int i = 0; i < 500; ++i) out.push_back(s.sample(l.data(), 200));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, DrawFrequenciesFollowTheDistribution) {
  // A fixed seed makes this deterministic (std::mt19937_64's output is fixed by the C++ standard),
  // so it cannot flake; the bound is what a fair draw would exceed with probability 8e-6
  // (chi-square, 9 degrees of freedom), so a visibly biased draw cannot pass.
  const std::vector<float> l{2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f};
  SamplerParams sp = off();
  sp.seed = 1234;
  const TokenProbs d = candidate_distribution(sp, l.data(), 10, {});
  ASSERT_EQ(d.ids.size(), 10u);
  Sampler s(sp);
  const int n = 200000;
  std::map<int32_t, int> count;
  for (int i = 0; i < n; ++i) ++count[s.sample(l.data(), 10)];
  double chi2 = 0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double expected = n * d.probs[i];
    const double diff = count[d.ids[i]] - expected;
    chi2 += diff * diff / expected;
  }
  EXPECT_LT(chi2, 40.0);
}

TEST(Sampler, PickIndexWalksTheCumulativeSum) {
  const std::vector<double> p{0.25, 0.5, 0.25};
  EXPECT_EQ(pick_index(p, 0.0), 0u);
  EXPECT_EQ(pick_index(p, 0.2499), 0u);
  EXPECT_EQ(pick_index(p, 0.25), 1u);
  EXPECT_EQ(pick_index(p, 0.75), 2u);
  EXPECT_EQ(pick_index(p, 0.9999999), 2u);
  EXPECT_EQ(pick_index({0.5, 0.4999}, 0.99995), 1u);  // rounding short of 1: the last candidate
}

TEST(Sampler, BadParametersAreErrors) {
  auto error = [](SamplerParams p) { return test::error_of([&] { validate(p); }); };
  SamplerParams p;
  EXPECT_EQ(error(p), "");
  p.temp = -2.0f;  // negative temperature: greedy, as llama.cpp
  EXPECT_EQ(error(p), "");
  auto with = [](auto set) {
    SamplerParams q;
    set(q);
    return q;
  };
  EXPECT_NE(error(with([](SamplerParams& q) { q.temp = NAN; })).find("temperature"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.top_k = -1; })).find("top-k"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.top_p = 0.0f; })).find("top-p"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.top_p = 1.5f; })).find("top-p"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.top_p = NAN; })).find("top-p"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.min_p = -0.1f; })).find("min-p"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.min_p = 1.1f; })).find("min-p"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.repeat_penalty = 0.0f; })).find("repeat penalty"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.repeat_penalty = -1.0f; })).find("repeat penalty"), std::string::npos);
  EXPECT_NE(error(with([](SamplerParams& q) { q.repeat_last_n = -2; })).find("repeat-last-n"), std::string::npos);
  EXPECT_THROW(Sampler(with([](SamplerParams& q) { q.top_k = -5; })), Error);
  const float one = 1.0f;
  EXPECT_THROW(candidate_distribution(SamplerParams(), &one, 0, {}), Error);
}

}  // namespace
}  // namespace slake
