// The exact KV cache: per layer and per KV head (never repeated per query head), the retained
// tokens' keys (after RoPE), values and positions, kept in position order. Heads of one layer may
// hold different numbers of tokens, which is what per-head eviction policies need. Keys and values
// are stored rows of their KV types (kv_type.h), read back a few rows at a time; a KIVI-typed
// tensor is stored per head by KiviRows (kv_kivi.h) instead of as rows.
#pragma once
#include <type_traits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "slake/kv/kv_kivi.h"
#include "slake/kv/kv_recall.h"
#include "slake/state_archive.h"
#include "slake/kv/kv_type.h"
#include "slake/kv/linear_cache.h"

namespace slake {

struct KvHead {
  std::vector<uint8_t> k;    // [n][k_row bytes], capacity reserved up front
  std::vector<uint8_t> v;    // [n][v_row bytes]
  std::vector<int32_t> pos;  // [n]
  int n = 0;                 // tokens held
  LinearState lin;           // the evicted tokens (empty unless a compensating policy evicts)
  RecallStore recall;        // the evicted tokens kept for recall (inactive unless the cache recalls)
  KvType type_k = KvType::F32, type_v = KvType::F32;
  size_t k_row = 0, v_row = 0;  // bytes of one stored row (0 for a KIVI type: k or v stays empty)
  KiviRows kivi_k, kivi_v;      // the keys / values when their type is KIVI (else inactive)

  const uint8_t* key_row(int i) const { return k.data() + static_cast<size_t>(i) * k_row; }
  const uint8_t* value_row(int i) const { return v.data() + static_cast<size_t>(i) * v_row; }
  // Key or value i as d floats: in place for f32, else read into `scratch` (d floats).
  const float* key(int i, int d, float* scratch) const { return keys(i, 1, d, scratch); }
  const float* value(int i, int d, float* scratch) const { return values(i, 1, d, scratch); }
  // Rows [j0, j0 + rows) as floats, as key()/value() for several rows (scratch: rows * d floats).
  const float* keys(int j0, int rows, int d, float* scratch) const {
    if (type_k == KvType::F32) return reinterpret_cast<const float*>(key_row(j0));
    load_keys(j0, rows, d, scratch);
    return scratch;
  }
  const float* values(int j0, int rows, int d, float* scratch) const {
    if (type_v == KvType::F32) return reinterpret_cast<const float*>(value_row(j0));
    load_values(j0, rows, d, scratch);
    return scratch;
  }
  // Rows [j0, j0 + rows) as floats into dst, whatever the type.
  void load_keys(int j0, int rows, int d, float* dst) const;
  void load_values(int j0, int rows, int d, float* dst) const;
  // The fp32 rows in place; only for an f32 cache (tests and references).
  const float* key(int i, int d) const { return f32_rows(type_k, key_row(i), d); }
  const float* value(int i, int d) const { return f32_rows(type_v, value_row(i), d); }
  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(k, v, pos, n, lin, recall, type_k, type_v, k_row, v_row, kivi_k, kivi_v);
  }

 private:
  static const float* f32_rows(KvType t, const uint8_t* p, int d);
};

// What compacting one head changed, for KvCache::note_compacted.
struct KvCompaction {
  int removed = 0;       // tokens no longer held
  bool new_lin = false;  // the head's linear state went from empty to holding something
  int64_t stored = 0;    // bytes the head's recall store grew by
};

class KvCache {
 public:
  // centroids > 0: the heads' linear states are centroid states of that many (kv_policy.h).
  // Keys are stored as type_k, values as type_v. recall.on(): evicted tokens go to each head's
  // recall store (kv_recall.h), and attention recalls recall.pages pages of it per query.
  KvCache(int n_layers, int n_kv_heads, int head_dim, int capacity, int centroids = 0, KvType type_k = KvType::F32,
          KvType type_v = KvType::F32, RecallConfig recall = {});

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int capacity() const { return capacity_; }
  KvType type_k() const { return type_k_; }
  KvType type_v() const { return type_v_; }
  const RecallConfig& recall() const { return recall_; }

  KvHead& head(int layer, int h) { return heads_[static_cast<size_t>(layer * n_kv_heads_ + h)]; }
  const KvHead& head(int layer, int h) const { return heads_[static_cast<size_t>(layer * n_kv_heads_ + h)]; }

  // Appends one token's k and v (kv_dim = n_kv_heads * head_dim values each) to every head of a
  // layer, stored as the cache's types.
  void append(int layer, const float* k, const float* v, int32_t pos);
  void clear();

  // Bytes a cache of `capacity` tokens per head takes when full: stored keys, values and positions
  // (for KIVI types a bound: token_bytes per token plus head_bytes per head).
  static size_t planned_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity, KvType type_k = KvType::F32,
                              KvType type_v = KvType::F32);
  // Bytes one held token takes in one head (for KIVI types a bound, with head_bytes).
  static size_t token_bytes(int head_dim, KvType type_k, KvType type_v);
  // Bytes a head may take beyond token_bytes per token: KIVI key groups' scales and minima.
  static size_t head_bytes(int head_dim, KvType type_k, KvType type_v);

  // After a layer's eviction: KIVI-typed heads quantise their residual rows in whole groups
  // (kv_kivi.h). Nothing for the other types.
  void settle(int layer);

  // Keeps, in order, the tokens of head (layer, h) whose indices are flagged in `keep` (size n);
  // the others are absorbed into its linear state when `absorb` is set, and go to its recall
  // store when `store` is set (a cache that recalls), else are dropped.
  void compact(int layer, int h, const std::vector<char>& keep, bool absorb, bool store = false);
  // The same in two steps, so that several heads can be compacted at once: compact_head touches
  // only head (layer, h) and may run concurrently for distinct heads; note_compacted (one thread)
  // then updates the cache's counts and peak.
  KvCompaction compact_head(int layer, int h, const std::vector<char>& keep, bool absorb, bool store = false);
  void note_compacted(const KvCompaction& c);

  // Drops, in every head of `layer`, the rows at positions below min_pos (a sliding layer's rows
  // that no later query sees), without absorbing them.
  void drop_before(int layer, int32_t min_pos);

  // Cuts every head back to its first n tokens, when each holds exactly positions 0, 1, ... in
  // order (nothing evicted or dropped, no linear state, no recall store, no KIVI type) and at least
  // n of them. Returns false, changing nothing, otherwise.
  bool truncate(int n);
  bool can_truncate() const;  // whether truncate may cut back to any n up to what is held

  // Returns to the OS the memory pages of head (layer, h) beyond the tokens it holds, keeping the
  // reservation: after a large eviction, resident memory then follows what is held.
  void release_unused(int layer, int h);

  // Tokens held, summed over layers and heads.
  int64_t tokens_held() const;
  // Bytes in use: key/value/position storage of the held tokens, the linear states that hold
  // anything and the recall stores. The peak is the largest value since construction or clear().
  size_t bytes_used() const;
  // The recall stores' part of bytes_used.
  size_t store_bytes_used() const { return static_cast<size_t>(store_bytes_); }
  size_t peak_bytes_used() const { return peak_bytes_; }
  // Bytes allocated for the heads' rows (KIVI storage included), held or not.
  size_t bytes_allocated() const;

  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(n_layers_, n_kv_heads_, head_dim_, capacity_, centroids_, type_k_, type_v_, kivi_, held_, lin_heads_, store_bytes_, recall_, peak_bytes_, heads_);
    // The stores read back go where this cache keeps them (--kv-store-file), not on the heap.
    if constexpr (std::is_same_v<A, StateReader>)
      for (KvHead& h : heads_)
        if (h.recall.active()) h.recall.keep_rows_in(recall_.file_dir);
  }

 private:
  void note_usage();

  int n_layers_, n_kv_heads_, head_dim_, capacity_;
  int centroids_;
  KvType type_k_, type_v_;
  bool kivi_;  // either type is KIVI's: bytes are counted per head
  int64_t held_ = 0;       // tokens held over all heads
  int64_t lin_heads_ = 0;  // heads whose linear state holds anything
  int64_t store_bytes_ = 0;  // the recall stores' bytes
  RecallConfig recall_;
  size_t peak_bytes_ = 0;
  std::vector<KvHead> heads_;
};

}  // namespace slake
