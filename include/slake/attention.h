// Exact causal attention on the CPU: each query streams over the retained keys of its KV head in
// tiles with an online softmax, so memory stays O(tile + head_dim) whatever the context length.
#pragma once
#include <cstdint>

#include "slake/kv_cache.h"
#include "slake/thread_pool.h"

namespace slake {

// Whether the key at position `key_pos` is visible from the query at `qpos`: causal, and inside
// the sliding window when one is set (window > 0).
inline bool key_visible(int32_t key_pos, int32_t qpos, int window) {
  return key_pos <= qpos && (window <= 0 || key_pos > qpos - window);
}

struct AttentionShape {
  int n_heads;     // query heads
  int n_kv_heads;  // KV heads; query head h reads KV head h / (n_heads / n_kv_heads)
  int head_dim;
  int sliding_window;  // 0: none; else key at position j is visible to query at i iff i - window < j <= i
};

// out[t] (n_heads * head_dim) = softmax(q[t] K^T / sqrt(d)) V over the keys of `layer` in `cache`
// whose positions are visible from qpos[t]; PTAA (ptaa.h) for heads whose linear state is not empty.
void attention_prefill(float* out, const float* q, const int32_t* qpos, int n_tokens, const KvCache& cache, int layer,
                       const AttentionShape& s, ThreadPool& pool);

// One query head over one KV head: the online-softmax kernel the above runs per (token, head).
void attention_one(float* out, const float* q, int32_t qpos, const KvHead& kv, int head_dim, int sliding_window);

}  // namespace slake
