// Causal attention on the CPU for prefill and decode alike. attention_prefill runs the flash kernel
// of attention_rows.h over blocks of query rows that share a KV head, then PTAA's merge with the
// head's linear state (ptaa.h). attention_one is the plain per-(query, head) online softmax, kept
// as the scalar reference the CUDA kernels are tested against.
#pragma once
#include <cstdint>
#include <vector>

#include "slake/kv/kv_cache.h"
#include "slake/cpu/thread_pool.h"

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
  float softcap = 0.0f;  // > 0: every logit x becomes softcap * tanh(x / softcap) (Gemma 2)
};

// out[t] (n_heads * head_dim) = softmax(q[t] K^T / sqrt(d)) V over the keys of `layer` in `cache`
// (the logits soft-capped when s.softcap > 0)
// whose positions are visible from qpos[t]; PTAA (ptaa.h) for heads whose linear state is not empty.
// Query heads of one KV head read each key once (GQA), whatever the number of tokens.
// `decode_step`: the one token of a decode step, which may attend the recall pages an earlier step
// chose (RecallConfig::every); other calls choose afresh and drop any choice held.
void attention_prefill(float* out, const float* q, const int32_t* qpos, int n_tokens, const KvCache& cache, int layer,
                       const AttentionShape& s, ThreadPool& pool, bool decode_step = false);

struct DecodeRowScores;  // kv_scores.h

// attention_prefill for one decode token at qpos whose scores against every row of each KV head of
// `layer` are computed already (scores[kvh], rows as the cache holds them now): the keys are not
// read again (algorithm.md §5.2: scores computed once, for eviction and attention).
void attention_decode(float* out, const float* q, int32_t qpos, const KvCache& cache, int layer, const AttentionShape& s,
                      const std::vector<DecodeRowScores>& scores, ThreadPool& pool);

// One query head over one KV head, the same result one key at a time (the scalar reference).
void attention_one(float* out, const float* q, int32_t qpos, const KvHead& kv, int head_dim, int sliding_window,
                   float softcap = 0.0f);

}  // namespace slake
