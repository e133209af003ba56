// Policy parameters (algorithm.md §2.4, §6): resolution, equality, the policies' parts, the
// per-model defaults (§2.4), bad values. The window statistics are tested in test_kv_scores.cpp.
#include <gmock/gmock.h>

#include <cmath>
#include <functional>
#include <random>

#include "reference_math.h"
#include "slake/context.h"
#include "slake/error.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/kv_scores.h"
#include "slake/model/model.h"
#include "test_util.h"

namespace slake {
namespace {

KvPolicyParams cake(int budget, int window) {
  KvPolicyParams p;
  p.policy = "cake";
  p.budget = budget;
  p.window = window;
  return p;
}

TEST(KvPolicyParams, BadValuesAreRefused) {
  EXPECT_THROW(validate(cake(16, 32)), Error);
  KvPolicyParams p = cake(64, 0);
  EXPECT_THROW(validate(p), Error);
  p = cake(-1, 32);
  EXPECT_THROW(validate(p), Error);
  p.budget = 64;
  p.policy = "bogus";
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("unknown KV policy 'bogus'")));
  p.policy = "slake";
  validate(p);
  p.compensate = "maybe";
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("compensator")));
  p.compensate = "centroids";
  validate(p);
  EXPECT_EQ(p.centroid_count(), 32);
  EXPECT_TRUE(p.absorbs());
  EXPECT_FALSE(p.taylor());
  p.centroids = 0;
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("centroid count")));
  p.centroids = 32;
  p.compensate = "none";
  EXPECT_FALSE(p.absorbs());
  p.observe = 33;  // more observing queries than the window of 32
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--kv-observe")));
  p.observe = -1;
  EXPECT_THROW(validate(p), Error);
  p.observe = 8;
  validate(p);
  EXPECT_EQ(p.observed(), 8);
  p.observe = 0;
  EXPECT_EQ(p.observed(), 32);
  // slake-wide's window is checked as resolve_kv_defaults will widen it: 768 at C=1024.
  p.policy = "slake-wide";
  p.budget = 1024;
  p.observe = 768;
  validate(p);
  p.observe = 769;
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("0..window (768)")));
  p.observe = 0;
  p.policy = "slake";
  p.budget = 64;
  p.tau1 = 0.0;
  EXPECT_THROW(validate(p), Error);
  p.tau1.reset();
  p.alpha = -0.5;
  EXPECT_THROW(validate(p), Error);
  p.alpha.reset();
  p.delta = -1;
  EXPECT_THROW(validate(p), Error);
  p.delta = 1;
  p.gamma = -1;
  EXPECT_THROW(validate(p), Error);
  p.gamma = 200;
  // The recall store: a page count, a page size and a row type; the Taylor state or nothing for
  // the rest; off (recall()) unless the policy evicts.
  p.recall_pages = 8;
  validate(p);
  EXPECT_EQ(p.recall().pages, 8);
  p.compensate = "centroids";
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("not centroids")));
  p.compensate = "taylor";
  p.store_type = KvType::KIVI2;
  EXPECT_THAT([&] { validate(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("not a row type")));
  p.store_type = KvType::Q4_0;
  p.recall_page = 0;
  EXPECT_THROW(validate(p), Error);
  p.recall_page = 16;
  p.recall_pages = -1;
  EXPECT_THROW(validate(p), Error);
  p.recall_pages = 8;
  p.budget = 0;
  validate(p);
  EXPECT_FALSE(p.recall().on());
}

// Two policies are equal only when every field is: a server slot reuses its evictor on equality,
// so a field == forgot would let a request run under another request's policy.
TEST(KvPolicyParams, EqualityComparesEveryField) {
  const KvPolicyParams a;
  EXPECT_TRUE(a == KvPolicyParams{});
  std::vector<std::pair<const char*, std::function<void(KvPolicyParams&)>>> changes{
      {"policy", [](KvPolicyParams& p) { p.policy = "slake"; }},
      {"budget", [](KvPolicyParams& p) { p.budget = 64; }},
      {"window", [](KvPolicyParams& p) { p.window = 8; }},
      {"observe", [](KvPolicyParams& p) { p.observe = 1; }},
      {"compensate", [](KvPolicyParams& p) { p.compensate = "none"; }},
      {"centroids", [](KvPolicyParams& p) { p.centroids = 8; }},
      {"gamma", [](KvPolicyParams& p) { p.gamma = 1.0; }},
      {"tau1", [](KvPolicyParams& p) { p.tau1 = 1.0; }},
      {"tau2", [](KvPolicyParams& p) { p.tau2 = 1.0; }},
      {"alpha", [](KvPolicyParams& p) { p.alpha = 0.5; }},
      {"beta", [](KvPolicyParams& p) { p.beta = 0.4; }},
      {"delta", [](KvPolicyParams& p) { p.delta = 2.0; }},
      {"cascade", [](KvPolicyParams& p) { p.cascade = false; }},
      {"evict_every", [](KvPolicyParams& p) { p.evict_every = 2; }},
      {"type_k", [](KvPolicyParams& p) { p.type_k = KvType::Q8_0; }},
      {"type_v", [](KvPolicyParams& p) { p.type_v = KvType::Q8_0; }},
      {"recall_pages", [](KvPolicyParams& p) { p.recall_pages = 4; }},
      {"recall_page", [](KvPolicyParams& p) { p.recall_page = 32; }},
      {"store_type", [](KvPolicyParams& p) { p.store_type = KvType::Q4_0; }},
      {"recall_score", [](KvPolicyParams& p) { p.recall_score = RecallScore::Quest; }},
  };
  for (const auto& [name, change] : changes) {
    KvPolicyParams b;
    change(b);
    EXPECT_FALSE(a == b) << name;
    EXPECT_TRUE(a != b) << name;
  }
}

// resolve_kv_policy is where settings become a policy: a budget alone means slake, a named
// policy or no budget keeps what was asked, bad settings throw, and a model fills the defaults.
TEST(KvPolicyParams, ResolveAppliesTheBudgetRuleValidatesAndFillsDefaults) {
  KvPolicyParams p;
  p.budget = 64;
  EXPECT_EQ(resolve_kv_policy(p, true).policy, "slake");
  EXPECT_EQ(resolve_kv_policy(p, false).policy, "full");
  p.policy = "cake";
  EXPECT_EQ(resolve_kv_policy(p, true).policy, "cake");
  p.budget = 16;  // not above the window
  EXPECT_THROW(resolve_kv_policy(p, true), Error);
  p = KvPolicyParams{};
  p.policy = "slake-wide";
  p.budget = 512;
  ModelConfig c;
  c.n_layers = 2;
  const KvPolicyParams r = resolve_kv_policy(p, false, &c);
  EXPECT_EQ(r.window, 256);
  EXPECT_TRUE(r.tau1 && r.tau2 && r.alpha && r.beta);
  EXPECT_TRUE(resolve_kv_policy(r, false, &c) == r);  // resolving twice changes nothing
  EXPECT_FALSE(resolve_kv_policy(p, false).tau1);     // no model: no model defaults
}

TEST(KvPolicyParams, PartsFollowThePolicyTable) {
  EXPECT_EQ(policy_parts("streaming").selector, KvSelector::Recent);
  EXPECT_EQ(policy_parts("h2o").selector, KvSelector::HeavyHitter);
  EXPECT_EQ(policy_parts("snapkv").allocator, KvAllocator::Uniform);
  EXPECT_EQ(policy_parts("pyramidkv").selector, KvSelector::WindowMax7);
  EXPECT_EQ(policy_parts("pyramidkv").allocator, KvAllocator::Pyramid);
  EXPECT_EQ(policy_parts("cake").allocator, KvAllocator::Cake);
  EXPECT_EQ(policy_parts("slake").selector, KvSelector::Indicator);
  EXPECT_EQ(policy_parts("slake").allocator, KvAllocator::Vabs);
  KvPolicyParams p = cake(64, 32);
  EXPECT_FALSE(p.taylor());  // the compensator: Taylor for slake only, unless asked
  p.policy = "slake";
  EXPECT_TRUE(p.taylor());
  p.compensate = "none";
  EXPECT_FALSE(p.taylor());
  p.policy = "snapkv";
  p.compensate = "taylor";
  EXPECT_TRUE(p.taylor());
}

TEST(KvPolicyParams, SlakeWideRanksAtMostHalfTheBudgetAnd256Tokens) {
  EXPECT_EQ(policy_parts("slake-wide").selector, KvSelector::Indicator);
  EXPECT_EQ(policy_parts("slake-wide").allocator, KvAllocator::VabsVariance);
  EXPECT_TRUE(by_preference(KvAllocator::VabsVariance));
  EXPECT_FALSE(by_preference(KvAllocator::Pyramid));
  const ModelConfig cfg;
  KvPolicyParams p = cake(512, 32);
  p.policy = "slake-wide";
  EXPECT_FALSE(p.taylor());  // no compensator unless asked: the Taylor state did not earn its bytes
  EXPECT_EQ(resolve_kv_defaults(p, cfg).window, 256);
  p.budget = 60;  // 30: the window asked for is larger
  EXPECT_EQ(resolve_kv_defaults(p, cfg).window, 32);
  p.budget = 1024;  // at most 256 tokens ranked by attention
  EXPECT_EQ(resolve_kv_defaults(p, cfg).window, 768);
  p.window = 900;
  EXPECT_EQ(resolve_kv_defaults(p, cfg).window, 900);
  p.policy = "slake";  // slake keeps the window it is given
  p.window = 32;
  EXPECT_EQ(resolve_kv_defaults(p, cfg).window, 32);
  p.policy = "slake-wide";
  validate(resolve_kv_defaults(p, cfg));
}

TEST(KvPolicyParams, DefaultsComeFromThePapersTables) {
  ModelConfig llama31;  // the shapes of Llama-3.1-8B, Llama-2-7B and Mistral-7B-v0.3
  llama31.n_layers = 32;
  llama31.dim = 4096;
  llama31.n_kv_heads = 8;
  llama31.n_vocab = 128256;
  ModelConfig llama2 = llama31, mistral = llama31, other = llama31;
  llama2.n_kv_heads = 32;
  llama2.n_vocab = 32000;
  mistral.n_vocab = 32768;
  other.n_vocab = 50000;
  auto at = [](const ModelConfig& c, int budget) { return resolve_kv_defaults(cake(budget, 32), c); };
  auto expect = [](const KvPolicyParams& p, double t1, double t2, double a, double b) {
    EXPECT_EQ(*p.tau1, t1);
    EXPECT_EQ(*p.tau2, t2);
    EXPECT_EQ(*p.alpha, a);
    EXPECT_EQ(*p.beta, b);
  };
  expect(at(llama31, 128), 1.6, 0.6, 0.4, 0.2);
  expect(at(llama31, 1024), 1.6, 0.4, 0.6, 0.5);
  expect(at(llama31, 256), 1.6, 0.6, 0.6, 0.5);  // tau: nearer 128; alpha/beta: the 256 row
  expect(at(llama2, 128), 0.9, 2.3, 0.5, 0.4);
  expect(at(llama2, 1024), 1.9, 1.8, 0.5, 0.4);
  expect(at(mistral, 128), 1.0, 0.8, 0.6, 0.5);
  expect(at(mistral, 1024), 0.8, 0.5, 0.4, 0.2);
  expect(at(other, 128), 1.0, 1.0, 0.5, 0.4);
  KvPolicyParams given = cake(128, 32);  // what the user sets stays
  given.tau1 = 3.0;
  given.beta = 0.0;
  const KvPolicyParams r = resolve_kv_defaults(given, llama31);
  EXPECT_EQ(*r.tau1, 3.0);
  EXPECT_EQ(*r.tau2, 0.6);
  EXPECT_EQ(*r.beta, 0.0);
}

}  // namespace
}  // namespace slake
