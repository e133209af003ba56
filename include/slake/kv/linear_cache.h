// The linear (Taylor) cache of one layer and KV head (algorithm.md §3.1): what remains of every token
// evicted from the exact cache. n, ksum = sum k, vsum = sum v, M = sum k v^T, all fp32;
// d*d + 2d + 1 floats whatever the number of absorbed tokens.
//
// The centroid compensator (`--kv-compensate centroids`, algorithm.md §3.2) keeps instead K merged
// tokens: each evicted token joins the centroid whose mean key is nearest (L2), the first K seeding
// one each; a centroid holds its count and the sums of its keys and values. n plus K (2d + 1)
// floats, attended as K tokens of weight count at the mean key and value.
#pragma once
#include <cstddef>
#include <vector>

namespace slake {

struct LinearState {
  int head_dim = 0;
  float n = 0.0f;
  std::vector<float> ksum, vsum;  // [d]
  std::vector<float> M;           // [d][d], M[i][j] = sum k_i v_j
  // Centroid mode (centroids > 0): ksum, vsum and M stay empty.
  int centroids = 0;
  std::vector<float> cn;          // [K] tokens per centroid (0: not seeded yet)
  std::vector<float> ck, cv;      // [K][d] sums of their keys and values

  // Storage is allocated by the first absorption: a head that never evicts costs nothing.
  explicit LinearState(int d = 0, int n_centroids = 0) : head_dim(d), centroids(n_centroids) {}

  // n += 1; ksum += k; vsum += v; M += k v^T (centroid mode: the nearest centroid takes k and v).
  void absorb(const float* k, const float* v);
  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(head_dim, n, ksum, vsum, M, centroids, cn, ck, cv);
  }

  // Absorbs `count` tokens at once: rows of k and v (each head_dim long, `stride` floats apart).
  void absorb_batch(const float* k, const float* v, int count, size_t stride);
  void clear();
  size_t bytes() const {
    const size_t d = static_cast<size_t>(head_dim);
    return (centroids > 0 ? static_cast<size_t>(centroids) * (2 * d + 1) + 1 : d * (d + 2) + 1) * sizeof(float);
  }

 private:
  void allocate();
  void absorb_centroid(const float* k, const float* v);
};

}  // namespace slake
