// Tiled online-softmax attention against float64 brute force: GQA, causal masking by position,
// sliding windows, key counts that are not multiples of the tile, and retained sets with gaps.
// Decode-sized calls (one block of rows per KV head) over more than 1024 keys take the split-keys
// path (parts merged per row); they are here too.
#include <cmath>
#include <random>

#include "slake/kv/attention.h"
#include "reference_math.h"
#include "test_util.h"

namespace slake {
namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim, n_keys, window, stride;  // stride: positions of kept keys (gaps > 1)
  int n_q = 9;                                                 // query tokens
};

class AttentionVsBruteForce : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionVsBruteForce, Matches) {
  const Shape s = GetParam();
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  KvCache cache(1, s.n_kv_heads, s.head_dim, s.n_keys);
  const int kvd = s.n_kv_heads * s.head_dim;
  std::vector<float> k(static_cast<size_t>(kvd)), v(static_cast<size_t>(kvd));
  for (int j = 0; j < s.n_keys; ++j) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    cache.append(0, k.data(), v.data(), j * s.stride);
  }
  const int n_q = s.n_q;
  const int qd = s.n_heads * s.head_dim;
  std::vector<float> q(static_cast<size_t>(n_q * qd)), out(q.size());
  std::vector<int32_t> qpos(n_q);
  for (auto& x : q) x = nd(rng);
  const int last = (s.n_keys - 1) * s.stride;
  for (int t = 0; t < n_q; ++t) qpos[static_cast<size_t>(t)] = std::max(0, last - 37 * t);
  ThreadPool pool(2);
  attention_prefill(out.data(), q.data(), qpos.data(), n_q, cache, 0, {s.n_heads, s.n_kv_heads, s.head_dim, s.window}, pool);
  const int group = s.n_heads / s.n_kv_heads;
  for (int t = 0; t < n_q; ++t)
    for (int h = 0; h < s.n_heads; ++h) {
      const size_t off = static_cast<size_t>(t * qd + h * s.head_dim);
      const std::vector<double> want = test::softmax_attention(q.data() + off, qpos[static_cast<size_t>(t)], cache.head(0, h / group), s.head_dim, s.window);
      for (int i = 0; i < s.head_dim; ++i)
        ASSERT_NEAR(out[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], 2e-5 * (1 + std::abs(want[static_cast<size_t>(i)])))
            << "token " << t << " head " << h << " dim " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionVsBruteForce,
                         ::testing::Values(Shape{4, 4, 8, 1, 0, 1}, Shape{4, 4, 8, 63, 0, 1}, Shape{8, 2, 16, 65, 0, 1},
                                           Shape{8, 2, 16, 200, 0, 1}, Shape{6, 3, 12, 130, 17, 1},
                                           Shape{8, 1, 64, 257, 64, 1}, Shape{4, 2, 8, 100, 0, 3},
                                           Shape{4, 2, 8, 100, 50, 3}, Shape{16, 1, 32, 90, 0, 1},
                                           Shape{12, 4, 8, 70, 0, 1},
                                           // One decode token, SmolLM2's heads, 3 and 2 parts of keys;
                                           // two tokens of a group of 4; a window and gaps.
                                           Shape{9, 3, 64, 3000, 0, 1, 1}, Shape{9, 3, 64, 2049, 0, 1, 1},
                                           Shape{8, 2, 16, 2500, 0, 1, 2}, Shape{9, 3, 64, 3000, 1500, 2, 1}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           const Shape& s = i.param;
                           return "h" + std::to_string(s.n_heads) + "_kv" + std::to_string(s.n_kv_heads) + "_d" +
                                  std::to_string(s.head_dim) + "_keys" + std::to_string(s.n_keys) + "_win" +
                                  std::to_string(s.window) + "_stride" + std::to_string(s.stride) + "_q" + std::to_string(s.n_q);
                         });

}  // namespace
}  // namespace slake
