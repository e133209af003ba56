// Observation-window statistics against slake::window_stats (both poolings, GQA, a window of 1,
// fewer observing queries than the window keeps, and prefix lengths that are not multiples of the
// 128-token chunk; every cache row type the device stores). The device works in double from fp32
// dot products, the CPU from fp32 scores and an fp32 softmax (RowBlock::scores, lane_softmax), both
// summing in double: indicator within 1e-4 relative (1e-7 absolute), entropy and variance sums
// within 1e-5 relative.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kv_device.h"
#include "slake/kv/kv_scores.h"
#include "slake/cpu/thread_pool.h"

namespace slake::gpu::test {
namespace {

void run_case_typed(int d, int n_heads, int n_kv, int S, int window, int n_obs, TokenPool pool, uint32_t seed, KvType tk,
                    KvType tv) {
  KvCache cache(1, n_kv, d, S, 0, tk, tv);
  for (int t = 0; t < S; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t, -2.0f, 2.0f);
    const std::vector<float> v = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * t + 1);
    cache.append(0, k.data(), v.data(), t);
  }
  const std::vector<float> qw = random_floats(static_cast<size_t>(n_obs) * n_heads * d, seed + 999, -1.5f, 1.5f);
  const double gamma = 200.0;
  const int P = S - window;
  ThreadPool threads(1);
  const LayerStats want =
      slake::window_stats(qw.data(), S, n_obs, P, cache, 0, AttentionShape{n_heads, n_kv, d, 0}, gamma, pool, threads);

  DeviceKvLayer dev(cache, 0, S);
  DeviceBuffer<float> dq(qw), indicator(static_cast<size_t>(n_kv) * P);
  DeviceBuffer<double> totals(2), scratch(window_stats_scratch_doubles(n_heads, n_obs, P));
  window_stats(indicator.get(), totals.get(), dq.get(), S, n_obs, P, n_heads, dev.view(), gamma, pool == TokenPool::Avg5 ? 0 : 1,
               scratch.get());
  std::vector<float> want_ind;
  for (const auto& row : want.indicator) want_ind.insert(want_ind.end(), row.begin(), row.end());
  const std::string what =
      "S=" + std::to_string(S) + " window=" + std::to_string(window) + " observing=" + std::to_string(n_obs) + kv_types_label(tk, tv);
  expect_close(indicator.download(), want_ind, 1e-7, 1e-4, what + " indicator");
  expect_close(totals.download(), std::vector<double>{want.entropy, want.variance}, 0, 1e-5, what + " entropy, variance");
}

// Every stored row type the device has: the kernels and the CPU read the same stored keys.
void run_case(int d, int n_heads, int n_kv, int S, int window, TokenPool pool, uint32_t seed, int n_obs = 0) {
  for (const auto& [tk, tv] : device_row_types(d))
    run_case_typed(d, n_heads, n_kv, S, window, n_obs > 0 ? n_obs : window, pool, seed, tk, tv);
}

// A later chunk of a chunked prefill: the cache holds what earlier chunks kept (positions with
// gaps) and then the chunk's rows. The device takes rows (S and P counted in rows), the CPU
// positions; the indicators are per row on both. scatter_scores then files each row's score
// under its position and leaves the positions no row holds alone.
void gapped_case(int d, int n_heads, int n_kv, int kept, int chunk, int window, TokenPool pool, uint32_t seed, int observing = 0) {
  std::vector<int32_t> pos;
  for (int t = 0; static_cast<int>(pos.size()) < kept; t += 1 + static_cast<int>(pos.size() % 3)) pos.push_back(t);  // gaps of 0 to 2
  const int t0 = pos.back() + 5, S = t0 + chunk, rows = kept + chunk, n_obs = observing > 0 ? observing : window;
  for (int t = t0; t < S; ++t) pos.push_back(t);
  KvCache cache(1, n_kv, d, S, 0, KvType::F32, KvType::F32);
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * r, -2.0f, 2.0f);
    const std::vector<float> v = random_floats(static_cast<size_t>(n_kv) * d, seed + 2 * r + 1);
    cache.append(0, k.data(), v.data(), pos[static_cast<size_t>(r)]);
  }
  const std::vector<float> qw = random_floats(static_cast<size_t>(n_obs) * n_heads * d, seed + 999, -1.5f, 1.5f);
  ThreadPool threads(1);
  const LayerStats want = slake::window_stats(qw.data(), S, n_obs, S - window, cache, 0, AttentionShape{n_heads, n_kv, d, 0}, 50.0,
                                              pool, threads);
  const int Pr = rows - window;
  DeviceKvLayer dev(cache, 0, rows);
  DeviceBuffer<float> dq(qw), by_row(static_cast<size_t>(n_kv) * Pr);
  DeviceBuffer<double> totals(2), scratch(window_stats_scratch_doubles(n_heads, n_obs, Pr));
  window_stats(by_row.get(), totals.get(), dq.get(), rows, n_obs, Pr, n_heads, dev.view(), 50.0, pool == TokenPool::Avg5 ? 0 : 1,
               scratch.get());
  std::vector<float> want_ind;
  for (const auto& row : want.indicator) {
    ASSERT_EQ(static_cast<int>(row.size()), Pr);
    want_ind.insert(want_ind.end(), row.begin(), row.end());
  }
  const std::string what = "kept " + std::to_string(kept) + " + chunk " + std::to_string(chunk);
  const std::vector<float> got = by_row.download();
  expect_close(got, want_ind, 1e-7, 1e-4, what + " indicator");
  expect_close(totals.download(), std::vector<double>{want.entropy, want.variance}, 0, 1e-5, what + " entropy, variance");

  const int P = S - window;
  DeviceBuffer<float> by_pos(std::vector<float>(static_cast<size_t>(n_kv) * P, -1.0f));
  scatter_scores(by_pos.get(), P, by_row.get(), dev.view(), Pr);
  std::vector<float> expect(static_cast<size_t>(n_kv) * P, -1.0f);
  for (int g = 0; g < n_kv; ++g)
    for (int r = 0; r < Pr; ++r) expect[static_cast<size_t>(g * P + pos[static_cast<size_t>(r)])] = got[static_cast<size_t>(g * Pr + r)];
  EXPECT_EQ(by_pos.download(), expect) << what << " scatter_scores";
}

TEST(KernelWindowStats, RowsWithGapsInPositionMatchTheCpu) {
  gapped_case(40, 8, 2, 30, 50, 16, TokenPool::Avg5, 5);
  gapped_case(64, 4, 4, 140, 70, 32, TokenPool::Max7, 6);
  gapped_case(64, 9, 3, 60, 120, 96, TokenPool::Avg5, 7, 8);  // slake-wide: a wide window observed by its end
}

TEST(KernelWindowStats, MatchesTheCpuStatistics) {
  run_case(40, 8, 2, 150, 16, TokenPool::Avg5, 1);
  run_case(64, 4, 4, 300, 32, TokenPool::Max7, 2);
  run_case(32, 6, 2, 20, 1, TokenPool::Avg5, 3);
  run_case(64, 9, 3, 260, 96, TokenPool::Avg5, 4, 8);  // slake-wide: a wide window observed by its end
}

}  // namespace
}  // namespace slake::gpu::test
