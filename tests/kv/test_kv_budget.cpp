// Budget integerisation (algorithm.md §2.5); expected values worked out by hand from its rules.
#include <numeric>
#include <random>

#include "slake/error.h"
#include "slake/kv/kv_budget.h"
#include "test_util.h"

namespace slake {
namespace {

using V = std::vector<int64_t>;

TEST(KvBudget, ProportionalWhenExact) { EXPECT_EQ(allocate_budgets({1, 1, 2}, 8, 100), (V{2, 2, 4})); }

TEST(KvBudget, TruncationShortfallGoesToLowestIndices) {
  // 10/3 truncates to 3 each; the missing 1 goes to layer 0.
  EXPECT_EQ(allocate_budgets({1, 1, 1}, 10, 100), (V{4, 3, 3}));
  // 11/3: two missing, to layers 0 and 1.
  EXPECT_EQ(allocate_budgets({1, 1, 1}, 11, 100), (V{4, 4, 3}));
}

TEST(KvBudget, ClampedExcessIsSpreadEvenly) {
  // [10, 1, 1] clamps to [6, 1, 1]; the excess 4 goes 2 + 2 to the layers below the cap.
  EXPECT_EQ(allocate_budgets({10, 1, 1}, 12, 6), (V{6, 3, 3}));
  // Excess 5 over two layers: 2 each, remainder to the lower index.
  EXPECT_EQ(allocate_budgets({11, 1, 1}, 13, 6), (V{6, 4, 3}));
}

TEST(KvBudget, ZeroScoresMeanUniform) { EXPECT_EQ(allocate_budgets({0, 0, 0, 0}, 10, 5), (V{3, 3, 2, 2})); }

TEST(KvBudget, RandomScoresKeepTheInvariants) {
  std::mt19937 rng(5);
  std::lognormal_distribution<double> ld(0.0, 2.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 40);
    const int64_t cap = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t total = static_cast<int64_t>(rng() % static_cast<uint64_t>(cap * L + 1));
    std::vector<double> s(static_cast<size_t>(L));
    for (double& x : s) x = ld(rng);
    const V b = allocate_budgets(s, total, cap);
    ASSERT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), total);
    for (int64_t x : b) {
      ASSERT_LE(x, cap);
      ASSERT_GE(x, 0);
    }
  }
}

TEST(KvBudget, RejectsImpossibleRequests) {
  EXPECT_THROW(allocate_budgets({1, 1}, 11, 5), Error);
  EXPECT_THROW(allocate_budgets({}, 1, 5), Error);
  EXPECT_THROW(allocate_budgets({1, -1}, 2, 5), Error);
  EXPECT_THROW(allocate_budgets({1, NAN}, 2, 5), Error);
}

// A later chunk of a chunked prefill: a layer holding fewer candidates than its share is capped at
// them and the rest goes to the other layers, so the total stays (C - Sw) * L; without `held` the
// split is the plain one. Caps per layer in allocate_budgets keep its invariants.
TEST(KvBudget, HeldRowsCapALayerAndTheRestGoesToTheOthers) {
  KvPolicyParams p;
  p.policy = "cake";
  p.budget = 26;
  p.window = 16;  // 10 prefix tokens per layer on average
  const std::vector<double> scores{1.0, 1.0, 2.0};
  const std::vector<int64_t> plain = cascade_budgets(p, KvAllocator::Cake, 3, 400, scores, {});
  EXPECT_EQ(plain, (std::vector<int64_t>{8, 7, 15}));  // 7.5, 7.5, 15 truncated; the shortfall to the lowest index
  const std::vector<int64_t> held{3, 100, 100};
  const std::vector<int64_t> capped = cascade_budgets(p, KvAllocator::Cake, 3, 400, scores, {}, &held);
  // 7, 7, 15; layer 0 clamped to 3, its 4 spread over the others (+2 each), the last 1 to layer 1.
  EXPECT_EQ(capped, (std::vector<int64_t>{3, 10, 17}));
  EXPECT_EQ(allocate_budgets({1, 1, 1}, 12, std::vector<int64_t>{2, 100, 5}), (std::vector<int64_t>{2, 5, 5}));
  EXPECT_THROW(allocate_budgets({1, 1}, 12, std::vector<int64_t>{2, 5}), Error);
}

}  // namespace
}  // namespace slake
