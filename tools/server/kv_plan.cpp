#include "kv_plan.h"

#include <algorithm>

#include "slake/kv/kv_cache.h"
#include "slake/kv/kv_evictor.h"
#include "slake/kv/linear_cache.h"

namespace slake::server {

size_t planned_kv_bytes(const ModelConfig& c, const KvPolicyParams& kv, int n_ctx, long long tokens, long long prompt) {
  const long long held = std::clamp<long long>(tokens, 1, n_ctx);
  // Bytes per token per layer (every KV head), as KvCache counts them.
  // With the selector's own state per row (h2o's and AhaKV's sums, AhaKV's ring), which grows and
  // shrinks with the rows.
  const size_t per_layer_token = static_cast<size_t>(c.n_kv_heads) *
                                 (KvCache::token_bytes(c.head_dim, kv.type_k, kv.type_v) + KvEvictor::selector_row_bytes(kv));
  // KIVI key groups' scales and minima beyond the per-token bound (0 for the other types).
  const size_t heads = static_cast<size_t>(c.n_layers) * c.n_kv_heads * KvCache::head_bytes(c.head_dim, kv.type_k, kv.type_v);
  const size_t full = static_cast<size_t>(held) * c.n_layers * per_layer_token + heads;
  // The recall store holds what is evicted: at most every token, in every layer and KV head.
  const size_t store = kv.recall().on() ? static_cast<size_t>(c.n_layers) * c.n_kv_heads *
                                              RecallStore::planned_bytes(c.head_dim, kv.recall_page, kv.store_type, held, kv.recall_score)
                                        : 0;
  if (!kv.evicts() || !kv.cascade) return full + store;
  const long long token_layers = static_cast<long long>(c.n_layers) * (kv.budget + kv.evict_every) + std::min(prompt, held);
  size_t bytes = std::min(full, static_cast<size_t>(token_layers) * per_layer_token + heads);
  if (kv.absorbs()) bytes += static_cast<size_t>(c.n_layers) * c.n_kv_heads * LinearState(c.head_dim, kv.centroid_count()).bytes();
  return bytes + store;
}

}  // namespace slake::server
