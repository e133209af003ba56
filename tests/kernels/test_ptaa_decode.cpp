// PTAA decode (split + merge) against the CPU's slake::ptaa_one, per query head: GQA, heads with
// different token counts (one empty), positions beyond the query (causal), a sliding window,
// heads with and without a linear state (Taylor or centroids), head dims that are not multiples of a warp, and split
// lengths that leave ragged last splits; every cache row type the device stores. Tolerance:
// |diff| <= 2e-5 + 1e-4 |cpu|.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kv_device.h"
#include "slake/kv/ptaa.h"

namespace slake::gpu::test {
namespace {

struct Case {
  int head_dim, n_heads, n_kv_heads, window, split_len;
  std::vector<int> held;      // tokens per KV head
  std::vector<int> absorbed;  // tokens in each KV head's linear state
  float key_scale;            // larger: peakier softmax
  float evicted_along_q = 0;  // > 0: evicted keys are this multiple of query 0 (plus noise)
  int centroids = 0;          // > 0: the linear states are centroid states of this many
  float softcap = 0.0f;       // Gemma 2's logit soft-cap (KvLayerView::softcap; 0: none)
};

void run_case_typed(const Case& c, uint32_t seed, KvType tk, KvType tv) {
  const std::vector<float> q = random_floats(static_cast<size_t>(c.n_heads) * c.head_dim, seed + 99, -1.5f, 1.5f);
  const int d = c.head_dim, cap = *std::max_element(c.held.begin(), c.held.end()) + 1;
  KvCache cache(1, c.n_kv_heads, d, cap, 0, tk, tv);
  const int32_t qpos = 1000;
  for (int g = 0; g < c.n_kv_heads; ++g) {
    KvHead& kh = cache.head(0, g);
    const int n = c.held[static_cast<size_t>(g)];
    const std::vector<float> k = random_floats(static_cast<size_t>(n) * d, seed + 10 * g, -c.key_scale, c.key_scale);
    const std::vector<float> v = random_floats(static_cast<size_t>(n) * d, seed + 10 * g + 1);
    set_rows(kh, k, v, d);
    kh.pos.resize(static_cast<size_t>(n));
    // Increasing positions with gaps (evicted tokens); the last two lie after the query.
    for (int j = 0; j < n; ++j) kh.pos[static_cast<size_t>(j)] = j < n - 2 ? qpos - 3 * (n - 2 - j) + 1 : qpos + j;
    kh.n = n;
    kh.lin = LinearState(d, c.centroids);
    const int e = c.absorbed[static_cast<size_t>(g)];
    std::vector<float> ke = random_floats(static_cast<size_t>(e) * d, seed + 10 * g + 2, -c.key_scale, c.key_scale);
    if (c.evicted_along_q > 0)
      for (size_t i = 0; i < ke.size(); ++i) ke[i] += c.evicted_along_q * q[i % static_cast<size_t>(d)];
    const std::vector<float> ve = random_floats(static_cast<size_t>(e) * d, seed + 10 * g + 3);
    for (int t = 0; t < e; ++t) kh.lin.absorb(ke.data() + static_cast<size_t>(t) * d, ve.data() + static_cast<size_t>(t) * d);
  }
  DeviceKvLayer dev(cache, 0, cap);
  DeviceBuffer<float> dq(q), out(static_cast<size_t>(c.n_heads) * d);
  const int max_held = cap;
  DeviceBuffer<float> scratch(ptaa_scratch_floats(c.n_heads, d, ptaa_splits(max_held, c.split_len)));
  KvLayerView view = dev.view();
  view.softcap = c.softcap;
  ptaa_decode(out.get(), dq.get(), qpos, c.n_heads, view, dev.lin(), c.window, max_held, c.split_len, scratch.get());
  std::vector<float> want(static_cast<size_t>(c.n_heads) * d);
  const int group = c.n_heads / c.n_kv_heads;
  for (int h = 0; h < c.n_heads; ++h) {
    const KvHead& kh = cache.head(0, h / group);
    ptaa_one(want.data() + static_cast<size_t>(h) * d, q.data() + static_cast<size_t>(h) * d, qpos, kh, kh.lin, d, c.window, c.softcap);
  }
  expect_close(out.download(), want, 2e-5, 1e-4,
               "d=" + std::to_string(d) + " window=" + std::to_string(c.window) + " split=" + std::to_string(c.split_len) +
                   " centroids=" + std::to_string(c.centroids) + kv_types_label(tk, tv));
}

// Every stored row type the device has: the kernel and the CPU read the same stored values.
void run_case(const Case& c, uint32_t seed) {
  for (const auto& [tk, tv] : device_row_types(c.head_dim)) run_case_typed(c, seed, tk, tv);
}

TEST(KernelPtaaDecode, MatchesCpuPtaaWithAndWithoutLinearState) {
  // KV head 0: retained + evicted; head 1: retained only (exact softmax); head 2: nothing retained
  // but a linear state; head 3: nothing at all (zeros, as the CPU).
  run_case({40, 8, 4, 0, 16, {75, 50, 0, 0}, {30, 0, 12, 0}, 1.0f}, 1);
  run_case({64, 4, 2, 0, 32, {129, 33}, {100, 1}, 1.0f}, 2);
  run_case({128, 4, 4, 0, 64, {200, 1, 64, 65}, {0, 7, 300, 2}, 0.5f}, 3);
}

TEST(KernelPtaaDecode, SlidingWindowAndASingleSplit) {
  run_case({72, 6, 2, 40, 256, {90, 61}, {20, 0}, 1.0f}, 4);
  run_case({256, 2, 1, 7, 5, {23}, {9}, 1.0f}, 5);
}

TEST(KernelPtaaDecode, MatchesCpuWithCentroidStates) {
  // Heads with more evicted tokens than centroids (all seeded), fewer (some unseeded), a state
  // only, none; 300 centroids take three chunks of the merge's weights.
  run_case({40, 8, 4, 0, 16, {75, 50, 0, 0}, {30, 3, 12, 0}, 1.0f, 0, 8}, 11);
  run_case({64, 4, 2, 0, 32, {129, 33}, {500, 1}, 1.0f, 0, 300}, 12);
  run_case({32, 1, 1, 0, 8, {40}, {25}, 1.0f, 24.0f, 4}, 13);  // evicted keys far above the retained
}

// Soft-capped logits (Gemma 2): the exact splits, the Taylor state by the chain rule, centroids.
TEST(KernelPtaaDecode, SoftCappedLogits) {
  run_case({40, 8, 4, 0, 16, {75, 50, 0, 0}, {30, 0, 12, 0}, 1.0f, 0, 0, 0.5f}, 14);
  run_case({40, 8, 4, 0, 16, {75, 50, 0, 0}, {30, 3, 12, 0}, 1.0f, 0, 8, 0.5f}, 15);
  run_case({72, 6, 2, 40, 256, {90, 61}, {20, 0}, 1.0f, 0, 0, 0.5f}, 16);
}

TEST(KernelPtaaDecode, EvictedKeysScoringFarAboveTheRetainedOnesStayFinite) {
  // Evicted keys along the query: mu is about 100 (|q|^2 ~ 24, d = 32) while the retained scores
  // are a few units, so exp(mu - max retained) overflows fp32 unless the merge takes mu into its
  // maximum; the output is then essentially the Taylor term alone.
  run_case({32, 1, 1, 0, 8, {40}, {25}, 1.0f, 24.0f}, 6);
}

}  // namespace
}  // namespace slake::gpu::test
