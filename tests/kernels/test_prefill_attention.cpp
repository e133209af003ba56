// Prefill attention against the CPU's per-(token, head) kernels (attention_one, or ptaa_one where
// the head's linear state holds anything, exactly as slake::attention_prefill chooses): GQA with
// groups that do and do not divide the block's 32 rows, heads with different token counts and
// position gaps, queries that see only part of the cache (causal), sliding windows, and a query
// count that leaves a ragged last block; every cache row type the device stores. Tolerance:
// |diff| <= 2e-5 + 1e-4 |cpu|.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kv_device.h"
#include "slake/kv/attention.h"
#include "slake/kv/ptaa.h"

namespace slake::gpu::test {
namespace {

struct Case {
  int head_dim, n_heads, n_kv_heads, window, n_q;
  std::vector<int> held;      // tokens per KV head (positions 0, 2, 4, ... for head 1, dense otherwise)
  std::vector<int> absorbed;  // tokens in each KV head's linear state
  int centroids = 0;          // > 0: centroid states of this many
  float softcap = 0.0f;       // Gemma 2's logit soft-cap (KvLayerView::softcap; 0: none)
  bool rotated = false;       // head 0's positions out of order: its rows start halfway (a chunk's recalled rows follow its own)
};

void run_case_typed(const Case& c, uint32_t seed, KvType tk, KvType tv) {
  const int d = c.head_dim, cap = *std::max_element(c.held.begin(), c.held.end());
  KvCache cache(1, c.n_kv_heads, d, cap, 0, tk, tv);
  for (int g = 0; g < c.n_kv_heads; ++g) {
    KvHead& kh = cache.head(0, g);
    const int n = c.held[static_cast<size_t>(g)];
    const std::vector<float> k = random_floats(static_cast<size_t>(n) * d, seed + 10 * g), v = random_floats(static_cast<size_t>(n) * d, seed + 10 * g + 1);
    set_rows(kh, k, v, d);
    kh.pos.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) kh.pos[static_cast<size_t>(j)] = g == 1 ? 2 * j : c.rotated ? (j + n / 2) % n : j;
    kh.n = n;
    kh.lin = LinearState(d, c.centroids);
    const int e = c.absorbed[static_cast<size_t>(g)];
    const std::vector<float> ke = random_floats(static_cast<size_t>(e) * d, seed + 10 * g + 2), ve = random_floats(static_cast<size_t>(e) * d, seed + 10 * g + 3);
    if (e > 0) kh.lin.absorb_batch(ke.data(), ve.data(), e, static_cast<size_t>(d));
  }
  // Queries at the last n_q positions of the densest head, plus one at position 0.
  std::vector<int32_t> qpos(static_cast<size_t>(c.n_q));
  for (int t = 0; t < c.n_q; ++t) qpos[static_cast<size_t>(t)] = t == 0 ? 0 : cap - c.n_q + t;
  const int64_t q_stride = static_cast<int64_t>(c.n_heads) * d + 8, out_stride = static_cast<int64_t>(c.n_heads) * d;
  const std::vector<float> q = random_floats(static_cast<size_t>(c.n_q * q_stride), seed + 77, -1.5f, 1.5f);
  DeviceKvLayer dev(cache, 0, cap);
  DeviceBuffer<float> dq(q), out(static_cast<size_t>(c.n_q * out_stride));
  DeviceBuffer<int32_t> dpos(qpos);
  KvLayerView view = dev.view();
  view.softcap = c.softcap;
  prefill_attention(out.get(), out_stride, dq.get(), q_stride, dpos.get(), c.n_q, c.n_heads, view, dev.lin(), c.window);
  std::vector<float> want(static_cast<size_t>(c.n_q * out_stride));
  const int group = c.n_heads / c.n_kv_heads;
  for (int t = 0; t < c.n_q; ++t)
    for (int h = 0; h < c.n_heads; ++h) {
      const KvHead& kh = cache.head(0, h / group);
      float* o = want.data() + t * out_stride + h * d;
      const float* qh = q.data() + t * q_stride + h * d;
      if (kh.lin.n > 0) ptaa_one(o, qh, qpos[static_cast<size_t>(t)], kh, kh.lin, d, c.window, c.softcap);
      else attention_one(o, qh, qpos[static_cast<size_t>(t)], kh, d, c.window, c.softcap);
    }
  expect_close(out.download(), want, 2e-5, 1e-4,
               "d=" + std::to_string(d) + " heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
                   " window=" + std::to_string(c.window) + " softcap=" + std::to_string(c.softcap) + kv_types_label(tk, tv));
}

// Every stored row type the device has: the kernel and the CPU read the same stored values.
void run_case(const Case& c, uint32_t seed) {
  for (const auto& [tk, tv] : device_row_types(c.head_dim)) run_case_typed(c, seed, tk, tv);
}

TEST(KernelPrefillAttention, GqaCausalMatchesTheCpu) {
  run_case({40, 8, 2, 0, 13, {70, 45}, {0, 0}}, 1);       // group 4: 8 tokens per block
  run_case({64, 6, 2, 0, 11, {50, 33}, {0, 0}}, 2);       // group 3: 10 tokens per block, 30 rows
  run_case({128, 2, 2, 0, 37, {100, 61}, {0, 0}}, 3);     // no GQA: 32 tokens per block
}

TEST(KernelPrefillAttention, SlidingWindowAndLinearState) {
  run_case({72, 4, 2, 17, 9, {90, 60}, {0, 0}}, 4);
  run_case({40, 8, 2, 0, 13, {70, 45}, {25, 0}}, 5);     // head 0 has evicted tokens: PTAA
  run_case({256, 4, 1, 0, 5, {40}, {8}}, 6);              // the largest head dim
}

TEST(KernelPrefillAttention, CentroidStates) {
  run_case({40, 8, 2, 0, 13, {70, 45}, {25, 3}, 8}, 7);    // head 0 all 8 seeded, head 1 three
  run_case({128, 2, 2, 17, 9, {90, 60}, {40, 0}, 32}, 8);  // a sliding window; head 1 none
}

// Rows whose positions do not increase (a prompt chunk's recalled rows after its own rows): tiles
// are skipped by their own least and greatest positions, not by the first and last row's.
TEST(KernelPrefillAttention, PositionsOutOfOrder) {
  Case c{40, 8, 2, 0, 13, {70, 45}, {0, 0}};
  c.rotated = true;
  run_case(c, 12);
  c = Case{72, 4, 2, 17, 9, {90, 60}, {0, 0}};  // and a sliding window
  c.rotated = true;
  run_case(c, 13);
}

// Soft-capped logits (Gemma 2): exact rows, the Taylor state by the chain rule, centroids.
TEST(KernelPrefillAttention, SoftCappedLogits) {
  run_case({64, 6, 2, 0, 11, {50, 33}, {0, 0}, 0, 0.5f}, 9);
  run_case({40, 8, 2, 17, 13, {70, 45}, {25, 0}, 0, 0.5f}, 10);
  run_case({40, 8, 2, 0, 13, {70, 45}, {25, 3}, 8, 0.5f}, 11);
}

}  // namespace
}  // namespace slake::gpu::test
