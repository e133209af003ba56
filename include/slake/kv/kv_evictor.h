// Runs a KV policy against the cache: at prefill, the statistics of each layer are gathered while
// it is computed, its budget is allocated and the layers seen so far are evicted down to their
// budgets (cascading, algorithm.md §2); at decode, one token per KV head is evicted whenever a head
// holds more than its budget plus the window (algorithm.md §5). Evicted tokens go into the linear
// state when the policy compensates.
#pragma once
#include <cstdint>
#include <vector>

#include "slake/kv/attention.h"
#include "slake/kv/kv_ahakv.h"
#include "slake/kv/kv_cache.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/kv_scores.h"
#include "slake/cpu/thread_pool.h"

namespace slake {

class KvEvictor {
 public:
  KvEvictor(const KvPolicyParams& p, int n_layers, const AttentionShape& s);
  // A policy over some of the cache's layers (`layers`, increasing: ModelConfig::kv_policy_layers);
  // every call about another layer does nothing, and budgets() lists the managed layers in order.
  KvEvictor(const KvPolicyParams& p, std::vector<int> layers, const AttentionShape& s);
  const KvPolicyParams& params() const { return p_; }
  void reset();

  // Prefill of a prompt of S tokens into an empty cache, layer by layer (`continues`: S positions
  // in all, the cache holding what the earlier chunks of a chunked prefill kept):
  void begin_prompt(int S, bool continues = false);
  // the queries (after RoPE) of n prompt tokens of `layer` at positions pos, once their keys are in the cache;
  void observe(int layer, const float* q, const int32_t* pos, int n, const KvCache& cache, ThreadPool& pool);
  // the layer has seen the whole prompt;
  void on_layer_done(int layer, KvCache& cache, ThreadPool& pool);
  // the last layer is done.
  void finish(KvCache& cache);
  // Whether the current prompt is long enough to evict anything (S > C + Sw).
  bool prompt_evicts() const { return prompt_evicts_; }

  // Decode: the token at `qpos` with query q (n_heads * head_dim) was appended to `layer`.
  void on_decode(int layer, const float* q, int32_t qpos, KvCache& cache, ThreadPool& pool);
  bool evicts_in_decode() const { return p_.evicts(); }
  // After on_decode(layer, ...) of a policy that scores by attention: the query's scores against
  // every row the layer's KV heads now hold, for attention_decode; else null.
  const std::vector<DecodeRowScores>* decode_row_scores(int layer) const;

  // What the selector keeps per cache row and KV head beyond the cache (h2o's and AhaKV's sums,
  // AhaKV's ring of the last r queries' rows and value norms, the SRE scores), in bytes: the
  // server's plan counts it with the cache. And what it holds now, in all.
  static size_t selector_row_bytes(const KvPolicyParams& p);
  size_t selector_state_bytes() const;

  // Budgets (prefix tokens kept, window excluded) of the managed layers seen so far, and their
  // preference scores.
  const std::vector<int64_t>& budgets() const { return budgets_; }
  const std::vector<double>& scores() const { return scores_; }
  // Evicts every layer seen so far down to `budgets`, keeping its best prefix tokens.
  void evict_to(const std::vector<int64_t>& budgets, KvCache& cache);

  // The state that evaluating tokens changes, for state files (state_archive.h); the rest follows
  // from the policy and the model. Reading it forgets the last decode step's scores.
  template <class A>
  void io(A& a) {
    a(S_, prompt_evicts_, continues_, q_window_, scores_, budgets_, token_scores_, sums_, sre_, head_budgets_);
    decode_x_layer_ = -1;
  }

 private:
  bool uses_window() const;  // the selector or the allocator reads the observation window
  bool accumulating() const;  // h2o, ahakv: scores are attention sums per row (sums_)
  int64_t gain_budget() const;  // AhaKV's step gain against this budget; 0: none
  // Grows managed layer m's sums of head kvh to the head's rows (and their value norms for AhaKV).
  void track_rows(int m, int kvh, const KvHead& kh);
  // The prompt queries' softmax rows into the sums: every query (h2o, ahakv without `recent`) or
  // the last r, each into its slot.
  void accumulate_prompt(int m, int layer, const float* q, const int32_t* pos, int n, const KvCache& cache, ThreadPool& pool);
  // The first n_cand rows' accumulated scores (times AhaKV's value prior when it has one).
  void accumulated_scores(int m, int kvh, int n_cand, double* score) const;
  // The managed layer's index among the managed ones, or -1.
  int slot(int layer) const {
    return layer >= 0 && layer < static_cast<int>(slot_.size()) ? slot_[static_cast<size_t>(layer)] : -1;
  }
  int64_t decode_budget(int layer, int kvh) const;
  // Managed layer m's budget for KV head kvh: its own under SRE-mass, else the layer's.
  int64_t head_budget(int m, int kvh, int64_t layer_budget) const;
  // The SRE selector (kv_sre.h): the candidates' errors at prefill (and SRE-mass's head budgets),
  // and those of rows that left the window since, at decode.
  void prefill_sre(int m, int layer, int P, const KvCache& cache, ThreadPool& pool, std::vector<std::vector<float>>& by_row);
  void update_sre(int layer, int kvh, const KvHead& kh, int n_cand);
  bool scores_in_decode() const;  // the decode victim is chosen by attention (algorithm.md §5.3)
  // The decode score of the first n_cand rows of (layer, kvh): the lowest is evicted first.
  void decode_candidate_scores(int layer, int kvh, int32_t qpos, const KvCache& cache, int n_cand, double* score) const;
  int decode_victim(int layer, int kvh, int32_t qpos, const KvCache& cache, int n_cand) const;
  void on_decode_batched(int layer, const float* q, int32_t qpos, KvCache& cache, ThreadPool& pool);
  // The decode query's scores against KV head kvh's rows, into decode_x_ (and, for h2o, its
  // softmax row into the accumulated sums).
  void score_decode_query(int layer, int kvh, const float* q, int32_t qpos, const KvHead& kh);
  // Compacts one head (KvCache::compact_head: safe concurrently for distinct heads; the caller
  // passes the result to cache.note_compacted) and its H2O sums.
  KvCompaction remove_rows(int layer, int kvh, const std::vector<char>& keep, KvCache& cache);

  KvPolicyParams p_;
  KvPolicyParts parts_;
  int n_layers_;              // managed
  std::vector<int> layers_;   // the managed cache layers, in order
  std::vector<int> slot_;     // [cache layer]: index in layers_, or -1
  AttentionShape s_;
  int S_ = 0;
  bool prompt_evicts_ = false;
  bool continues_ = false;  // a chunk after the first: budgets capped by the rows a layer holds
  std::vector<float> q_window_;  // the prompt's last Sobs queries of the current layer
  std::vector<double> scores_;
  std::vector<int64_t> budgets_;
  std::vector<std::vector<std::vector<float>>> token_scores_;  // [managed layer][kv head][position in P]
  std::vector<std::vector<AttentionSums>> sums_;               // h2o, ahakv: [managed layer][kv head]
  std::vector<std::vector<std::vector<float>>> sre_;           // sre: [managed layer][kv head][candidate row]
  std::vector<std::vector<int64_t>> head_budgets_;             // SRE-mass: [managed layer][kv head]
  std::vector<DecodeRowScores> decode_x_;  // [kv head]: the decode query's scores, of layer decode_x_layer_
  int decode_x_layer_ = -1;
};

}  // namespace slake
