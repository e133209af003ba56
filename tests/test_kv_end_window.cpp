// --kv-end-window: the prompt's last queries alone score its tokens too. A needle that only the
// last queries attend to loses, at the window's mean, to tokens that many earlier window queries
// attend to, and is evicted; with the end window's score added it is kept. Built by hand: one
// layer and KV head, keys along chosen axes so every query's attention goes where it is meant to.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "slake/error.h"
#include "slake/kv_evictor.h"

namespace slake {
namespace {

constexpr int kD = 16, kS = 100, kWindow = 40, kP = kS - kWindow, kNeedle = 30;
constexpr int kHubs[] = {6, 14, 22, 44, 52, 58};  // attended by 6 early window queries each

std::vector<float> axis(int a, float scale) {
  std::vector<float> v(kD, 0.0f);
  v[static_cast<size_t>(a)] = scale;
  return v;
}

// The prefix positions the layer keeps after the prompt, with `end_window` observing queries.
std::vector<int32_t> kept_prefix(int end_window) {
  KvPolicyParams p;
  p.policy = "cake";
  p.window = kWindow;
  p.budget = kWindow + 6;  // six prefix tokens kept
  p.end_window = end_window;
  const AttentionShape s{1, 1, kD, 0};
  KvCache cache(1, 1, kD, kS);
  for (int j = 0; j < kS; ++j) {
    int a = -1;
    for (int h = 0; h < 6; ++h)
      if (j == kHubs[h]) a = 1 + h;
    if (j == kNeedle) a = 0;
    const std::vector<float> k = a >= 0 ? axis(a, 6.0f) : axis(8 + j % 8, 0.3f), v = axis(j % kD, 1.0f);
    cache.append(0, k.data(), v.data(), j);
  }
  // Window queries: 36 look for the hubs (6 each); of the last 4, two look for the needle and two
  // for nothing in particular (as a question's tokens do). Over the window the needle's indicator
  // (mean + gamma var) is below each hub's; over the last 4 it is far above.
  std::vector<float> q;
  std::vector<int32_t> pos;
  for (int i = 0; i < kWindow; ++i) {
    const std::vector<float> qi = i < kWindow - 4 ? axis(1 + i % 6, 3.0f) : i % 2 == 0 ? axis(0, 3.0f) : axis(7, 1.0f);
    q.insert(q.end(), qi.begin(), qi.end());
    pos.push_back(kP + i);
  }
  ThreadPool pool(1);
  KvEvictor ev(p, 1, s);
  ev.begin_prompt(kS);
  ev.observe(0, q.data(), pos.data(), kWindow, cache, pool);
  ev.on_layer_done(0, cache, pool);
  ev.finish(cache);
  std::vector<int32_t> kept;
  for (int32_t x : cache.head(0, 0).pos)
    if (x < kP) kept.push_back(x);
  return kept;
}

bool holds(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(KvEndWindow, KeepsTheNeedleTheLastQueriesAttendTo) {
  const std::vector<int32_t> without = kept_prefix(0), with = kept_prefix(4);
  ASSERT_EQ(without.size(), 6u);
  ASSERT_EQ(with.size(), 6u);
  EXPECT_FALSE(holds(without, kNeedle)) << "at the window's mean the hubs outrank the needle";
  EXPECT_TRUE(holds(with, kNeedle)) << "the last 4 queries' own score keeps it";
}

TEST(KvEndWindow, MustBeBelowTheObservingQueries) {
  KvPolicyParams p;
  p.policy = "cake";
  p.budget = 128;
  p.end_window = 32;  // the whole window of 32
  EXPECT_THROW(validate(p), Error);
  p.end_window = 31;
  validate(p);
  p.policy = "slake-wide";  // whose window resolve_kv_defaults widens to 64 at C=128
  p.end_window = 32;
  validate(p);
  p.end_window = 64;
  EXPECT_THROW(validate(p), Error);
  p.end_window = -1;
  EXPECT_THROW(validate(p), Error);
}

}  // namespace
}  // namespace slake
