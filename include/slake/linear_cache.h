// The linear (Taylor) cache of one layer and KV head (spec section 3): what remains of every token
// evicted from the exact cache. n, ksum = sum k, vsum = sum v, M = sum k v^T, all fp32;
// d*d + 2d + 1 floats whatever the number of absorbed tokens.
#pragma once
#include <cstddef>
#include <vector>

namespace slake {

struct LinearState {
  int head_dim = 0;
  float n = 0.0f;
  std::vector<float> ksum, vsum;  // [d]
  std::vector<float> M;           // [d][d], M[i][j] = sum k_i v_j

  // Storage is allocated by the first absorption: a head that never evicts costs nothing.
  explicit LinearState(int d = 0) : head_dim(d) {}

  // n += 1; ksum += k; vsum += v; M += k v^T.
  void absorb(const float* k, const float* v);
  // Absorbs `count` tokens at once: rows of k and v (each head_dim long, `stride` floats apart).
  void absorb_batch(const float* k, const float* v, int count, size_t stride);
  void clear();
  size_t bytes() const { return (static_cast<size_t>(head_dim) * (head_dim + 2) + 1) * sizeof(float); }

 private:
  void allocate();
};

}  // namespace slake
