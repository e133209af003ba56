// Prefill eviction (spec section 2): window statistics against float64 brute force, and the
// invariants of section 7 end to end: a budget covering the prompt changes nothing, cascading
// equals one-shot eviction with the final budgets (CAKE's Theorem 1), and the memory bound.
#include <gmock/gmock.h>

#include <cmath>
#include <random>

#include "reference_math.h"
#include "slake/context.h"
#include "slake/error.h"
#include "slake/kv_policy.h"
#include "slake/kv_scores.h"
#include "slake/model.h"
#include "test_util.h"

namespace slake {
namespace {

TEST(WindowStats, MatchesBruteForce) {
  const int H = 4, Hkv = 2, d = 8, S = 40, Sw = 6, P = S - Sw, G = H / Hkv;
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
  std::vector<float> q(static_cast<size_t>(Sw * H * d));
  for (auto& x : q) x = nd(rng);
  ThreadPool pool(2);
  const LayerStats st = window_stats(q.data(), S, Sw, cache, 0, {H, Hkv, d, 0}, gamma, TokenPool::Avg5, pool);

  double entropy = 0, variance = 0;
  std::vector<std::vector<double>> pooled(Hkv, std::vector<double>(P, 0.0));
  for (int h = 0; h < H; ++h) {
    const KvHead& kv = cache.head(0, h / G);
    std::vector<std::vector<double>> A(Sw);
    for (int i = 0; i < Sw; ++i) {
      std::vector<double> x;
      for (int j = 0; j <= P + i; ++j) x.push_back(test::dot64(&q[static_cast<size_t>((i * H + h) * d)], kv.key(j, d), d) / std::sqrt(8.0));
      const double m = *std::max_element(x.begin(), x.end());
      double z = 0;
      for (double& e : x) z += (e = std::exp(e - m));
      for (double& e : x) e /= z;
      A[static_cast<size_t>(i)] = x;
      for (int j = 0; j < P; ++j) entropy -= x[static_cast<size_t>(j)] * std::log(x[static_cast<size_t>(j)] + 1e-10);
    }
    std::vector<double> I(P);
    for (int j = 0; j < P; ++j) {
      double mean = 0, var = 0;
      for (int i = 0; i < Sw; ++i) mean += A[static_cast<size_t>(i)][static_cast<size_t>(j)] / Sw;
      for (int i = 0; i < Sw; ++i) var += std::pow(A[static_cast<size_t>(i)][static_cast<size_t>(j)] - mean, 2) / (Sw - 1);
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
  for (int h = 0; h < Hkv; ++h)
    for (int j = 0; j < P; ++j)
      ASSERT_NEAR(st.indicator[static_cast<size_t>(h)][static_cast<size_t>(j)], pooled[static_cast<size_t>(h)][static_cast<size_t>(j)],
                  1e-5 * (1 + pooled[static_cast<size_t>(h)][static_cast<size_t>(j)]));
}

KvPolicyParams cake(int budget, int window, bool taylor, bool cascade = true) {
  KvPolicyParams p;
  p.policy = "cake";
  p.budget = budget;
  p.window = window;
  p.compensate = taylor ? "taylor" : "none";
  p.cascade = cascade;
  return p;
}

class PrefillEviction : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_SHARED_OR_SKIP(path, "models/stories260K.gguf");
    model_ = load_model(path);
    // The model's own greedy story as the prompt: real text with real attention patterns.
    Context ctx(*model_, {kPrompt, 2, 256});
    std::vector<int32_t> cur{1};
    std::vector<float> logits;
    for (int i = 0; i < kPrompt; ++i) {
      prompt_.push_back(cur[0]);
      if (i + 1 == kPrompt) break;
      ctx.eval(cur, &logits);
      cur = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    }
  }
  std::vector<float> run(const KvPolicyParams& p, std::unique_ptr<Context>* keep = nullptr) {
    auto ctx = std::make_unique<Context>(*model_, ContextParams{kPrompt + 8, 2, 64, p});
    std::vector<float> logits, step;
    ctx->eval(prompt_, &logits);
    for (int t = 0; t < 4; ++t) {  // a few decode steps through PTAA
      ctx->eval({static_cast<int32_t>(3 + t)}, &step);
      logits.insert(logits.end(), step.begin(), step.end());
    }
    if (keep) *keep = std::move(ctx);
    return logits;
  }
  static constexpr int kPrompt = 300;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_F(PrefillEviction, BudgetCoveringThePromptChangesNothing) {
  const std::vector<float> full = run({});
  EXPECT_EQ(run(cake(kPrompt + 4, 32, true)), full);  // C = S + generated (spec section 7)
  EXPECT_EQ(run(cake(1000, 32, true)), full);
  EXPECT_NE(run(cake(64, 32, true)), full);  // and a real budget does change something
}

TEST_F(PrefillEviction, CascadingEqualsOneShot) {
  for (bool taylor : {false, true}) {
    std::unique_ptr<Context> a, b;
    run(cake(64, 16, taylor, true), &a);
    run(cake(64, 16, taylor, false), &b);
    ASSERT_EQ(a->evictor().budgets(), b->evictor().budgets());
    const KvCache &ca = a->kv_cache(), &cb = b->kv_cache();
    for (int l = 0; l < ca.n_layers(); ++l)
      for (int h = 0; h < ca.n_kv_heads(); ++h) {
        const KvHead &x = ca.head(l, h), &y = cb.head(l, h);
        ASSERT_EQ(x.pos, y.pos) << "layer " << l << " head " << h;
        ASSERT_EQ(x.lin.n, y.lin.n);
        for (size_t i = 0; i < x.lin.M.size(); ++i) ASSERT_NEAR(x.lin.M[i], y.lin.M[i], 1e-4 * (1 + std::abs(y.lin.M[i])));
      }
  }
}

TEST_F(PrefillEviction, RetainedTokensFollowTheBudgets) {
  const int C = 64, Sw = 16;
  Context ctx(*model_, {kPrompt, 2, 64, cake(C, Sw, true)});
  ctx.eval(prompt_, nullptr);
  const KvCache& kv = ctx.kv_cache();
  const std::vector<int64_t>& b = ctx.evictor().budgets();
  ASSERT_EQ(static_cast<int>(b.size()), kv.n_layers());
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), int64_t{C - Sw} * kv.n_layers());
  for (int l = 0; l < kv.n_layers(); ++l)
    for (int h = 0; h < kv.n_kv_heads(); ++h) {
      const KvHead& kh = kv.head(l, h);
      EXPECT_EQ(kh.n, b[static_cast<size_t>(l)] + Sw);
      EXPECT_EQ(kh.lin.n, static_cast<float>(kPrompt - kh.n));
      EXPECT_TRUE(std::is_sorted(kh.pos.begin(), kh.pos.end()));
      for (int i = 0; i < Sw; ++i) EXPECT_EQ(kh.pos[static_cast<size_t>(kh.n - Sw + i)], kPrompt - Sw + i);  // window kept
    }
  // About C*L tokens per KV head in total, far below S*L.
  EXPECT_EQ(kv.tokens_held(), int64_t{C} * kv.n_layers() * kv.n_kv_heads());
}

TEST(KvPolicyParams, BadValuesAreRefused) {
  EXPECT_THROW(validate(cake(16, 32, false)), Error);
  KvPolicyParams p = cake(64, 0, false);
  EXPECT_THROW(validate(p), Error);
  p = cake(-1, 32, false);
  EXPECT_THROW(validate(p), Error);
  p.budget = 64;
  p.policy = "bogus";
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("unknown KV policy 'bogus'")));
}

}  // namespace
}  // namespace slake

namespace slake {
namespace {

TEST_F(PrefillEviction, DecodeKeepsEveryHeadWithinBudget) {
  const int C = 48, Sw = 16;
  Context ctx(*model_, {kPrompt + 40, 2, 64, cake(C, Sw, true)});
  ctx.eval(prompt_, nullptr);
  const std::vector<int64_t> b = ctx.evictor().budgets();
  std::vector<float> logits;
  for (int t = 0; t < 40; ++t) {
    ctx.eval({static_cast<int32_t>(5 + t % 7)}, &logits);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    const KvCache& kv = ctx.kv_cache();
    for (int l = 0; l < kv.n_layers(); ++l)
      for (int h = 0; h < kv.n_kv_heads(); ++h) {
        const KvHead& kh = kv.head(l, h);
        ASSERT_EQ(kh.n, b[static_cast<size_t>(l)] + Sw);                   // one in, one out
        ASSERT_EQ(kh.lin.n, static_cast<float>(kPrompt + t + 1 - kh.n));  // nothing lost
        ASSERT_EQ(kh.pos.back(), kPrompt + t);                             // the new token is kept
        ASSERT_TRUE(std::is_sorted(kh.pos.begin(), kh.pos.end()));
      }
  }
}

TEST_F(PrefillEviction, ShortPromptsGrowToTheUniformBudgetThenEvict) {
  const int C = 48, Sw = 16;
  Context ctx(*model_, {200, 1, 64, cake(C, Sw, false)});
  ctx.eval(std::vector<int32_t>(prompt_.begin(), prompt_.begin() + 40), nullptr);  // 40 <= C + Sw: no prefill eviction
  EXPECT_EQ(ctx.kv_cache().head(0, 0).n, 40);
  for (int t = 0; t < 30; ++t) ctx.eval({prompt_[static_cast<size_t>(40 + t)]}, nullptr);
  for (int l = 0; l < ctx.kv_cache().n_layers(); ++l) EXPECT_EQ(ctx.kv_cache().head(l, 1).n, C);
  EXPECT_EQ(ctx.kv_cache().head(0, 0).lin.n, 0.0f);  // no compensator: evicted tokens are dropped
}

}  // namespace
}  // namespace slake
