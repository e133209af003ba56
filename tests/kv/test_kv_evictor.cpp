// The KV evictor (src/kv/kv_evictor.cpp) under every evicting policy, end to end on stories260K
// (algorithm.md §2, §5 and §7), with the model's own greedy story as the prompt: a budget
// covering prompt and generation changes nothing, every head holds exactly its budget plus the
// window after prefill and after each decode step, nothing is lost from the linear state,
// cascading equals one-shot eviction (CAKE's Theorem 1), and the prefill peak stays inside the
// bound of algorithm.md §2.6.
#include <gmock/gmock.h>

#include <cmath>
#include <numeric>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/kv/kv_policy.h"
#include "slake/model/model.h"
#include "greedy.h"
#include "test_util.h"

namespace slake {
namespace {

KvPolicyParams policy(const std::string& name, int budget, int window, const std::string& compensate = "auto",
                      bool cascade = true) {
  KvPolicyParams p;
  p.policy = name;
  p.budget = budget;
  p.window = window;
  p.compensate = compensate;
  p.cascade = cascade;
  return p;
}

class Policies : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::shared_dir() + "/models/stories260K.gguf";
    if (!test::exists(path)) return;
    model_ = load_model(path).release();
    prompt_ = {model_->vocab.bos};
    const std::vector<int32_t> story = test::greedy_ids(*model_, kPrompt - 1, 2);
    prompt_.insert(prompt_.end(), story.begin(), story.end());
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    prompt_.clear();
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "shared material missing: " << test::shared_dir() << "/models/stories260K.gguf";
  }
  // Prefill of the prompt, then `steps` decode steps; the logits of the prompt's last token and of each step.
  static std::vector<float> run(const KvPolicyParams& p, std::unique_ptr<Context>* keep = nullptr, int steps = 4,
                                int n_batch = 64) {
    auto ctx = std::make_unique<Context>(*model_, ContextParams{kPrompt + steps, 2, n_batch, p});
    std::vector<float> logits, step;
    ctx->eval(prompt_, &logits);
    for (int t = 0; t < steps; ++t) {
      ctx->eval({static_cast<int32_t>(3 + t % 7)}, &step);
      logits.insert(logits.end(), step.begin(), step.end());
    }
    if (keep) *keep = std::move(ctx);
    return logits;
  }
  // Checks every head of every layer against the budgets, after n_seen tokens went through the cache.
  static void expect_within_budget(const Context& ctx, int window, int n_seen) {
    const KvCache& kv = ctx.kv_cache();
    const std::vector<int64_t>& b = ctx.evictor().budgets();
    ASSERT_EQ(static_cast<int>(b.size()), kv.n_layers());
    for (int l = 0; l < kv.n_layers(); ++l)
      for (int h = 0; h < kv.n_kv_heads(); ++h) {
        const KvHead& kh = kv.head(l, h);
        ASSERT_EQ(kh.n, b[static_cast<size_t>(l)] + window) << "layer " << l << " head " << h;
        const float absorbed = ctx.evictor().params().absorbs() ? static_cast<float>(n_seen - kh.n) : 0.0f;
        ASSERT_EQ(kh.lin.n, absorbed);  // every evicted token is in the linear state, once
        ASSERT_TRUE(std::is_sorted(kh.pos.begin(), kh.pos.end()));
        for (int i = 0; i < window; ++i) ASSERT_EQ(kh.pos[static_cast<size_t>(kh.n - window + i)], n_seen - window + i);
      }
  }

  static constexpr int kPrompt = 300;
  static Model* model_;
  static std::vector<int32_t> prompt_;
};
Model* Policies::model_ = nullptr;
std::vector<int32_t> Policies::prompt_;

TEST_P(Policies, BudgetCoveringPromptAndGenerationChangesNothing) {
  const std::vector<float> full = run({});
  for (const char* comp : {"taylor", "none"}) {
    EXPECT_EQ(run(policy(GetParam(), kPrompt + 4, 32, comp)), full) << comp;  // C = S + generated (algorithm.md §7)
    EXPECT_EQ(run(policy(GetParam(), 1000, 32, comp)), full) << comp;
  }
  EXPECT_NE(run(policy(GetParam(), 64, 32)), full);  // and a real budget does change something
}

TEST_P(Policies, PrefillAndDecodeKeepEveryHeadAtItsBudget) {
  const int C = 64, Sw = 16, steps = 30;
  for (const char* comp : {"taylor", "none"}) {
    SCOPED_TRACE(comp);
    Context ctx(*model_, {kPrompt + steps, 2, 64, policy(GetParam(), C, Sw, comp)});
    ctx.eval(prompt_, nullptr);
    const int W = ctx.evictor().params().window;  // Sw, or what the policy widens it to (slake-wide)
    EXPECT_EQ(W, GetParam() == std::string("slake-wide") ? C / 2 : Sw);
    const std::vector<int64_t> b = ctx.evictor().budgets();
    EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), int64_t{C - W} * ctx.kv_cache().n_layers());
    expect_within_budget(ctx, W, kPrompt);
    // About C*L tokens per KV head in all, far below S*L.
    EXPECT_EQ(ctx.kv_cache().tokens_held(), int64_t{C} * ctx.kv_cache().n_layers() * ctx.kv_cache().n_kv_heads());
    std::vector<float> logits;
    for (int t = 0; t < steps; ++t) {
      ctx.eval({prompt_[static_cast<size_t>(t)]}, &logits);
      for (float x : logits) ASSERT_TRUE(std::isfinite(x));
      ASSERT_EQ(ctx.evictor().budgets(), b);  // decode keeps the prefill budgets: one in, one out
      expect_within_budget(ctx, W, kPrompt + t + 1);
    }
  }
}

TEST_P(Policies, CascadingEqualsOneShot) {  // CAKE's Theorem 1, for every allocator
  for (const char* comp : {"taylor", "none"}) {
    std::unique_ptr<Context> a, b;
    run(policy(GetParam(), 64, 16, comp, true), &a, 0);
    run(policy(GetParam(), 64, 16, comp, false), &b, 0);
    ASSERT_EQ(a->evictor().budgets(), b->evictor().budgets());
    const KvCache &ca = a->kv_cache(), &cb = b->kv_cache();
    for (int l = 0; l < ca.n_layers(); ++l)
      for (int h = 0; h < ca.n_kv_heads(); ++h) {
        const KvHead &x = ca.head(l, h), &y = cb.head(l, h);
        ASSERT_EQ(x.pos, y.pos) << comp << " layer " << l << " head " << h;
        ASSERT_EQ(x.lin.n, y.lin.n);
        auto near = [](const std::vector<float>& u, const std::vector<float>& w) {
          ASSERT_EQ(u.size(), w.size());
          for (size_t i = 0; i < u.size(); ++i) ASSERT_NEAR(u[i], w[i], 1e-4 * (1 + std::abs(w[i])));
        };
        near(x.lin.ksum, y.lin.ksum);
        near(x.lin.vsum, y.lin.vsum);
        near(x.lin.M, y.lin.M);
      }
  }
}

TEST_P(Policies, PrefillPeakFollowsTheCascadingBound) {
  // algorithm.md §2.6: while layer m is prefilled, layers 0..m-1 hold at most total + Sw*m tokens
  // per KV head (their budgets over the layers seen so far sum to total) and layer m holds S.
  const int C = 64, Sw = 16;
  std::unique_ptr<Context> ctx;
  run(policy(GetParam(), C, Sw, "taylor"), &ctx, 0);
  const KvCache& kv = ctx->kv_cache();
  const int L = kv.n_layers(), Hkv = kv.n_kv_heads(), d = kv.head_dim();
  const size_t per_token = 2 * sizeof(float) * d + sizeof(int32_t);
  const size_t total = static_cast<size_t>(C - Sw) * L;
  const size_t bound = (total + static_cast<size_t>(Sw) * L + kPrompt) * Hkv * per_token + static_cast<size_t>(L) * Hkv * LinearState(d).bytes();
  EXPECT_LE(kv.peak_bytes_used(), bound);
  EXPECT_LT(kv.peak_bytes_used(), static_cast<size_t>(L) * Hkv * kPrompt * per_token);  // below the full cache
  EXPECT_GE(kv.peak_bytes_used(), static_cast<size_t>(kPrompt) * Hkv * per_token);      // one whole layer was held
}

TEST_P(Policies, ChunkSizeDoesNotChangeTheKeptTokens) {
  std::unique_ptr<Context> a, b;
  run(policy(GetParam(), 64, 16), &a, 0, 32);
  run(policy(GetParam(), 64, 16), &b, 0, 256);
  for (int l = 0; l < a->kv_cache().n_layers(); ++l)
    for (int h = 0; h < a->kv_cache().n_kv_heads(); ++h)
      ASSERT_EQ(a->kv_cache().head(l, h).pos, b->kv_cache().head(l, h).pos) << "layer " << l << " head " << h;
}

// Chunked prefill (--prefill-chunk). A chunk as long as the prompt is today's prefill, to the last
// digit; a budget covering the prompt makes the chunks the full cache (up to the order of the
// attention sums); a real budget keeps every head within it, the newest window exact and every
// evicted token in the linear state, through prefill and decode.
TEST_P(Policies, PrefillInChunks) {
  KvPolicyParams p = policy(GetParam(), 64, 16, "taylor");
  if (GetParam() == std::string("h2o")) {
    p.prefill_chunk = 100;
    EXPECT_THROW(validate(p), Error);  // h2o sums every query's attention over the whole prompt
    return;
  }
  std::unique_ptr<Context> whole, same;
  const std::vector<float> want = run(p, &whole);
  p.prefill_chunk = kPrompt;
  EXPECT_EQ(run(p, &same), want);
  p.prefill_chunk = kPrompt - 10;  // a rest shorter than the window joins the chunk before it: one pass
  EXPECT_EQ(run(p), want);
  for (int l = 0; l < whole->kv_cache().n_layers(); ++l)
    ASSERT_EQ(whole->kv_cache().head(l, 0).pos, same->kv_cache().head(l, 0).pos);

  KvPolicyParams wide = policy(GetParam(), kPrompt + 4, 16, "taylor");  // slake-wide's window: 152
  wide.prefill_chunk = 160;
  const std::vector<float> full = run({}), chunked = run(wide);
  ASSERT_EQ(chunked.size(), full.size());
  double max_abs = 0;
  for (float x : full) max_abs = std::max(max_abs, static_cast<double>(std::abs(x)));
  for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(chunked[i], full[i], 1e-5 * max_abs) << i;

  p.prefill_chunk = 100;
  {  // eval_prompt_chunk (the server's way in): a later chunk shorter than the window is refused
    Context c(*model_, {kPrompt, 2, 64, p});
    c.eval_prompt_chunk(std::vector<int32_t>(prompt_.begin(), prompt_.begin() + 100), nullptr);
    EXPECT_THROW(c.eval_prompt_chunk(std::vector<int32_t>(prompt_.begin() + 100, prompt_.begin() + 105), nullptr), Error);
  }
  const int steps = 12;
  p.prefill_chunk = 32;  // nine chunks: layers cut hard early may be allotted more than they hold later
  Context ctx(*model_, {kPrompt + steps, 2, 64, p});
  ctx.eval(prompt_, nullptr);
  const int W = ctx.evictor().params().window, L = ctx.kv_cache().n_layers();
  // The chunks did evict on their own: streaming (sinks and the newest) keeps what one pass keeps,
  // the attention-ranked policies, which saw less of the prompt at each step, do not.
  std::unique_ptr<Context> one_pass;
  run(policy(GetParam(), 64, 16, "taylor"), &one_pass, 0);
  bool same_kept = true;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < ctx.kv_cache().n_kv_heads(); ++h)
      same_kept = same_kept && ctx.kv_cache().head(l, h).pos == one_pass->kv_cache().head(l, h).pos;
  EXPECT_EQ(same_kept, GetParam() == std::string("streaming"));
  for (int t = 0; t <= steps; ++t) {
    const int seen = kPrompt + t;
    const std::vector<int64_t>& b = ctx.evictor().budgets();
    ASSERT_EQ(static_cast<int>(b.size()), L);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < ctx.kv_cache().n_kv_heads(); ++h) {
        const KvHead& kh = ctx.kv_cache().head(l, h);
        ASSERT_LE(kh.n, b[static_cast<size_t>(l)] + W) << "layer " << l << " step " << t;
        ASSERT_EQ(kh.lin.n, static_cast<float>(seen - kh.n));  // every evicted token absorbed, once
        ASSERT_TRUE(std::is_sorted(kh.pos.begin(), kh.pos.end()));
        for (int i = 0; i < W; ++i) ASSERT_EQ(kh.pos[static_cast<size_t>(kh.n - W + i)], seen - W + i);
      }
    // The whole budget is used: a layer's budget is capped by the rows it holds, so what one
    // layer cannot keep goes to the others.
    EXPECT_EQ(ctx.kv_cache().tokens_held(), int64_t{64} * L * ctx.kv_cache().n_kv_heads()) << "step " << t;
    if (t < steps) ctx.eval({prompt_[static_cast<size_t>(t)]}, nullptr);
  }
}

// The recall store (algorithm.md §9): every evicted token goes to it, once; recalling every page
// of a lossless store attends every token again, so prefill and decode give the full cache's
// logits (up to the order of the sums), with the Taylor state covering nothing or no Taylor state
// at all. A prompt taken in chunks fills the store as it goes; its later chunks and its decode
// steps recall, so it too gives the full cache's logits.
TEST_P(Policies, RecallingEveryPageOfALosslessStoreIsTheFullCache) {
  auto f32 = [](KvPolicyParams p) {
    p.type_k = p.type_v = KvType::F32;
    return p;
  };
  const std::vector<float> full = run(f32({}), nullptr, 6);
  double max_abs = 0;
  for (float x : full) max_abs = std::max(max_abs, static_cast<double>(std::abs(x)));
  for (const char* comp : {"none", "taylor"})
    for (int chunk : {0, 64}) {
      if (chunk > 0 && GetParam() == std::string("h2o")) continue;
      KvPolicyParams p = f32(policy(GetParam(), 48, 16, comp));
      p.recall_pages = 1 << 20;
      p.recall_page = 8;
      p.store_type = KvType::F32;
      p.prefill_chunk = chunk;
      std::unique_ptr<Context> ctx;
      const std::vector<float> got = run(p, &ctx, 6);
      ASSERT_EQ(got.size(), full.size());
      for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(got[i], full[i], 2e-5 * max_abs) << comp << " chunk " << chunk << " logit " << i;
      for (int l = 0; l < ctx->kv_cache().n_layers(); ++l)
        for (int h = 0; h < ctx->kv_cache().n_kv_heads(); ++h) {
          const KvHead& kh = ctx->kv_cache().head(l, h);
          ASSERT_EQ(kh.n + kh.recall.n(), kPrompt + 6) << "layer " << l;  // nothing lost, nothing twice
          ASSERT_LT(kh.n, kPrompt);
        }
      EXPECT_GT(ctx->kv_cache().store_bytes_used(), 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Evicting, Policies, ::testing::Values("streaming", "h2o", "ahakv", "snapkv", "pyramidkv", "cake", "slake", "slake-wide"));

TEST_F(Policies, SlakeWideKeepsTheNewestHalfOfTheBudgetAfterPrefillAndDecode) {
  const int C = 64, half = C / 2;  // window 16 asked for, widened to 32
  std::unique_ptr<Context> ctx;
  run(policy("slake-wide", C, 16), &ctx, 6);
  const int newest = kPrompt + 6 - 1;
  for (int l = 0; l < ctx->kv_cache().n_layers(); ++l)
    for (int h = 0; h < ctx->kv_cache().n_kv_heads(); ++h) {
      const std::vector<int32_t>& pos = ctx->kv_cache().head(l, h).pos;
      ASSERT_GE(pos.size(), static_cast<size_t>(half));
      for (int i = 0; i < half; ++i)
        EXPECT_EQ(pos[pos.size() - half + i], newest - half + 1 + i) << "layer " << l << " head " << h;
    }
}

TEST_F(Policies, SlakeWidePrefersLayersByVabsTimesTheVarianceToDelta) {
  // slake-wide's layer score is slake's VABS preference (algorithm.md §2.4; same window) times
  // CAKE's attention variance Vr^delta; cake with 1/tau1 ~ 0 and tau2 = 1 scores a layer by Vr
  // alone.
  const int C = 64, W = 32;  // slake-wide widens the window 16 to C / 2
  std::unique_ptr<Context> vabs, var;
  run(policy("slake", C, W, "none"), &vabs, 0);
  KvPolicyParams cake = policy("cake", C, W);
  cake.tau1 = 1e15;
  cake.tau2 = 1.0;
  run(cake, &var, 0);
  for (double delta : {1.0, 0.5, 0.0}) {
    SCOPED_TRACE(delta);
    KvPolicyParams p = policy("slake-wide", C, 16);
    p.delta = delta;
    std::unique_ptr<Context> wide;
    run(p, &wide, 0);
    ASSERT_EQ(wide->evictor().params().window, W);
    const std::vector<double>& got = wide->evictor().scores();
    ASSERT_EQ(got.size(), vabs->evictor().scores().size());
    for (size_t l = 0; l < got.size(); ++l) {
      const double vr = var->evictor().scores()[l], want = vabs->evictor().scores()[l] * std::pow(vr, delta);
      ASSERT_GT(vr, 0.0);
      EXPECT_NEAR(got[l], want, 1e-9 * want) << "layer " << l;
    }
    if (delta == 0.0) EXPECT_EQ(wide->evictor().budgets(), vabs->evictor().budgets());  // VABS alone: slake's budgets
    else EXPECT_NE(wide->evictor().budgets(), vabs->evictor().budgets());
  }
}

TEST_F(Policies, StreamingKeepsSinksAndTheMostRecent) {
  const int C = 64, Sw = 16, b = C - Sw, P = kPrompt - Sw;
  std::unique_ptr<Context> ctx;
  run(policy("streaming", C, Sw), &ctx, 0);
  std::vector<int32_t> want{0, 1, 2, 3};
  for (int p = P - (b - 4); p < kPrompt; ++p) want.push_back(p);
  for (int l = 0; l < ctx->kv_cache().n_layers(); ++l) EXPECT_EQ(ctx->kv_cache().head(l, 0).pos, want);
}

TEST_F(Policies, StreamingWithRoomForFewerThanFourSinksKeepsTheEarliest) {
  const int C = 18, Sw = 16;  // two prefix tokens per layer
  std::unique_ptr<Context> ctx;
  run(policy("streaming", C, Sw), &ctx, 5);
  for (int l = 0; l < ctx->kv_cache().n_layers(); ++l) {
    const KvHead& kh = ctx->kv_cache().head(l, 1);
    ASSERT_EQ(kh.n, C);
    EXPECT_EQ(kh.pos[0], 0);
    EXPECT_EQ(kh.pos[1], 1);
    EXPECT_EQ(kh.pos[2], kPrompt + 5 - Sw);  // then the window
  }
}

TEST_F(Policies, PyramidBudgetsShrinkWithDepth) {
  std::unique_ptr<Context> ctx;
  run(policy("pyramidkv", 64, 16), &ctx, 0);
  const std::vector<int64_t>& b = ctx->evictor().budgets();
  EXPECT_TRUE(std::is_sorted(b.rbegin(), b.rend()));
  EXPECT_GT(b.front(), b.back());
}

TEST_F(Policies, ShortPromptsGrowToTheUniformBudgetThenEvict) {
  const int C = 48, Sw = 16;
  Context ctx(*model_, {200, 1, 64, policy("cake", C, Sw, "none")});
  ctx.eval(std::vector<int32_t>(prompt_.begin(), prompt_.begin() + 40), nullptr);  // 40 <= C + Sw: no prefill eviction
  EXPECT_EQ(ctx.kv_cache().head(0, 0).n, 40);
  for (int t = 0; t < 30; ++t) {
    ctx.eval({prompt_[static_cast<size_t>(40 + t)]}, nullptr);
    ASSERT_EQ(ctx.kv_cache().head(2, 3).n, std::min(41 + t, C));  // nothing leaves before a head reaches C
  }
  for (int l = 0; l < ctx.kv_cache().n_layers(); ++l) EXPECT_EQ(ctx.kv_cache().head(l, 1).n, C);
  EXPECT_EQ(ctx.kv_cache().head(0, 0).lin.n, 0.0f);  // no compensator: evicted tokens are dropped
}

TEST_F(Policies, TokensAddedLaterAreDecodedOneByOne) {
  // A second multi-token eval (a chat turn) goes through decode eviction token by token: the same
  // logits as feeding the tokens one at a time.
  const KvPolicyParams p = policy("slake", 64, 16);
  Context a(*model_, {kPrompt, 2, 64, p}), b(*model_, {kPrompt, 2, 64, p});
  const std::vector<int32_t> first(prompt_.begin(), prompt_.begin() + 200), more(prompt_.begin() + 200, prompt_.begin() + 220);
  std::vector<float> la, lb;
  a.eval(first, nullptr);
  b.eval(first, nullptr);
  a.eval(more, &la, true);
  for (int32_t t : more) {
    std::vector<float> step;
    b.eval({t}, &step);
    lb.insert(lb.end(), step.begin(), step.end());
  }
  EXPECT_EQ(la, lb);
  expect_within_budget(a, 16, 220);
}

// A model with local and global layers (the gemma3-swa fixture: five layers with an 8-token
// window, then a global one): a local layer's cache keeps the window - 1 rows a later query can
// still see, under every policy; the policy's budgets, eviction and linear state cover the global
// layers alone, and the local layers' attention is the full cache's.
TEST(PoliciesOnLocalLayers, LocalLayersKeepTheirWindowAndThePolicyTheGlobalLayers) {
  const auto m = load_model(test::fixtures_dir() + "/models/gemma3-swa/model.gguf");
  const ModelConfig& c = m->cfg;
  ASSERT_EQ(c.kv_policy_layers(), std::vector<int>{5});
  const std::vector<int32_t> prompt = [&] {
    std::vector<int32_t> p;
    for (int t = 0; t < 40; ++t) p.push_back((t * 37 + 11) % c.n_vocab);
    return p;
  }();
  for (const char* name : {"full", "slake", "cake", "snapkv", "streaming"}) {
    SCOPED_TRACE(name);
    KvPolicyParams p = policy(name, std::string(name) == "full" ? 0 : 12, 4);
    ContextParams cp{64, 2, 16, p};
    Context ctx(*m, cp);
    std::vector<float> logits;
    ctx.eval(prompt, &logits);
    for (int step = 0; step < 6; ++step) {
      ctx.eval({static_cast<int32_t>(step + 3)}, &logits);
      const int32_t last = static_cast<int32_t>(prompt.size()) + step;
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const KvHead& kh = ctx.kv_cache().head(l, h);
          if (c.layer_local(l)) {  // exactly the rows a later query can see: positions last - 6 .. last
            ASSERT_EQ(kh.n, c.sliding_window - 1) << "layer " << l;
            EXPECT_EQ(kh.pos.front(), last + 2 - c.sliding_window) << "layer " << l;
            EXPECT_EQ(kh.lin.n, 0.0f) << "layer " << l << ": nothing absorbed";
          } else {
            EXPECT_EQ(kh.n, std::string(name) == "full" ? last + 1 : 12) << "layer " << l;
          }
        }
    }
    if (std::string(name) != "full") {
      EXPECT_EQ(ctx.evictor().budgets(), std::vector<int64_t>{8});  // C - Sw, for the one global layer
      EXPECT_EQ(ctx.kv_cache().tokens_held(), int64_t{5 * 7 + 12} * c.n_kv_heads);
    }
  }
}

}  // namespace
}  // namespace slake
