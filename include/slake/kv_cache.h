// The exact KV cache: per layer and per KV head (never repeated per query head), the retained
// tokens' keys (after RoPE), values and positions, kept in position order. Heads of one layer may
// hold different numbers of tokens, which is what per-head eviction policies need.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "slake/linear_cache.h"

namespace slake {

struct KvHead {
  std::vector<float> k;      // [n][head_dim], capacity reserved up front
  std::vector<float> v;      // [n][head_dim]
  std::vector<int32_t> pos;  // [n]
  int n = 0;                 // tokens held
  LinearState lin;           // the evicted tokens (empty unless a compensating policy evicts)

  const float* key(int i, int d) const { return k.data() + static_cast<size_t>(i) * d; }
  const float* value(int i, int d) const { return v.data() + static_cast<size_t>(i) * d; }
};

class KvCache {
 public:
  // centroids > 0: the heads' linear states are centroid states of that many (kv_policy.h).
  KvCache(int n_layers, int n_kv_heads, int head_dim, int capacity, int centroids = 0);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int capacity() const { return capacity_; }

  KvHead& head(int layer, int h) { return heads_[static_cast<size_t>(layer * n_kv_heads_ + h)]; }
  const KvHead& head(int layer, int h) const { return heads_[static_cast<size_t>(layer * n_kv_heads_ + h)]; }

  // Appends one token's k and v (kv_dim = n_kv_heads * head_dim values each) to every head of a layer.
  void append(int layer, const float* k, const float* v, int32_t pos);
  void clear();

  // Bytes a cache of `capacity` tokens per head takes when full.
  static size_t planned_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity);

  // Keeps, in order, the tokens of head (layer, h) whose indices are flagged in `keep` (size n);
  // the others are absorbed into its linear state when `absorb` is set, else dropped.
  void compact(int layer, int h, const std::vector<char>& keep, bool absorb);

  // Returns to the OS the memory pages of head (layer, h) beyond the tokens it holds, keeping the
  // reservation: after a large eviction, resident memory then follows what is held.
  void release_unused(int layer, int h);

  // Tokens held, summed over layers and heads.
  int64_t tokens_held() const;
  // Bytes in use: key/value/position storage of the held tokens plus the linear states that hold
  // anything. The peak is the largest value since construction or clear().
  size_t bytes_used() const;
  size_t peak_bytes_used() const { return peak_bytes_; }
  size_t bytes_allocated() const;

 private:
  void note_usage();

  int n_layers_, n_kv_heads_, head_dim_, capacity_;
  int centroids_;
  int64_t held_ = 0;       // tokens held over all heads
  int64_t lin_heads_ = 0;  // heads whose linear state holds anything
  size_t peak_bytes_ = 0;
  std::vector<KvHead> heads_;
};

}  // namespace slake
