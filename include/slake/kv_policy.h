// KV-cache eviction at prefill (spec section 2): after each layer has attended over the whole
// prompt, the observation window's softmax rows give a per-token indicator and a layer preference
// score; the layer budgets are recomputed over the layers seen so far and every one of them is
// evicted down to its budget (cascading). Evicted tokens go into the linear state when the Taylor
// compensator is on.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "slake/attention.h"
#include "slake/kv_cache.h"
#include "slake/model.h"
#include "slake/thread_pool.h"

namespace slake {

struct KvPolicyParams {
  // full, streaming, h2o, snapkv, pyramidkv, cake, slake (spec section 6).
  std::string policy = "full";
  int budget = 0;               // C: average tokens kept per layer, window included; 0 = no eviction
  int window = 32;              // Sw
  // What happens to evicted tokens: "auto" (the policy's own: taylor for slake, none otherwise),
  // "taylor" (absorbed into the linear state, attended by PTAA) or "none" (dropped).
  std::string compensate = "auto";
  double gamma = 200.0;         // indicator variance weight
  // Layer-preference exponents; unset: the per-model defaults of the spec (resolve_kv_defaults).
  std::optional<double> tau1, tau2;   // CAKE
  std::optional<double> alpha, beta;  // VABS
  bool cascade = true;          // evict after every layer; false: once, after the last (Theorem 1 tests)

  bool taylor() const { return compensate == "taylor" || (compensate == "auto" && policy == "slake"); }
};

// The policy names, in the order of the spec's table.
const std::vector<std::string>& kv_policy_names();

// Fills the unset hyperparameters with the spec's defaults for this model and budget.
KvPolicyParams resolve_kv_defaults(KvPolicyParams p, const ModelConfig& c);

void validate(const KvPolicyParams& p);

// What the window statistics of one layer give (exposed for tests).
struct LayerStats {
  std::vector<std::vector<float>> indicator;  // [kv head][j in P], pooled and averaged over the group
  double entropy = 0.0;                       // Hn
  double variance = 0.0;                      // Vr
};

// q_window: the last `window` queries of the prompt ([window][n_heads * head_dim], after RoPE),
// at positions S - window .. S - 1; the layer's cache holds all S prompt tokens in order.
LayerStats window_stats(const float* q_window, int S, int window, const KvCache& cache, int layer,
                        const AttentionShape& s, double gamma, ThreadPool& pool);

class PrefillEvictor {
 public:
  PrefillEvictor(const KvPolicyParams& p, int n_layers);
  // True when a prompt of S tokens is long enough to evict anything.
  bool active(int S) const;
  // Called after layer `layer` has been prefilled over positions [0, S).
  void on_layer_done(int layer, const float* q_window, int S, KvCache& cache, const AttentionShape& s, ThreadPool& pool);
  // Called after the last layer (evicts, in one-shot mode).
  void finish(int S, KvCache& cache);
  // Decode (spec section 5): after the token at `qpos` was appended to `layer`, evicts from every
  // KV head holding more than b_l + Sw tokens its lowest-scoring candidate under query `q`
  // (n_heads * head_dim), repeatedly until the head is within budget.
  void on_decode(int layer, const float* q, int32_t qpos, KvCache& cache, const AttentionShape& s);
  // Whether decode steps evict (a policy with a budget).
  bool evicts_in_decode() const { return p_.policy != "full" && p_.budget > 0; }
  const std::vector<int64_t>& budgets() const { return budgets_; }  // of the layers seen so far
  // Evicts every layer seen so far down to `budgets` (prefix tokens kept), by indicator.
  void evict_to(const std::vector<int64_t>& budgets, int S, KvCache& cache);
  const std::vector<double>& scores() const { return scores_; }

 private:
  KvPolicyParams p_;
  int n_layers_;
  std::vector<double> scores_;
  std::vector<int64_t> budgets_;
  std::vector<LayerStats> stats_;
};

}  // namespace slake
