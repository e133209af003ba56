#include "kv_plan.h"

#include <algorithm>

#include "slake/kv_cache.h"
#include "slake/linear_cache.h"

namespace slake::server {

size_t planned_kv_bytes(const ModelConfig& c, const KvPolicyParams& kv, int n_ctx, long long tokens, long long prompt) {
  const long long held = std::clamp<long long>(tokens, 1, n_ctx);
  // Bytes per token per layer (every KV head), as KvCache counts them.
  const size_t per_layer_token = KvCache::planned_bytes(1, c.n_kv_heads, c.head_dim, 1, kv.type_k, kv.type_v);
  const size_t full = static_cast<size_t>(held) * c.n_layers * per_layer_token;
  if (!kv.evicts() || !kv.cascade) return full;
  const long long token_layers = static_cast<long long>(c.n_layers) * (kv.budget + kv.evict_every) + std::min(prompt, held);
  size_t bytes = std::min(full, static_cast<size_t>(token_layers) * per_layer_token);
  if (kv.absorbs()) bytes += static_cast<size_t>(c.n_layers) * c.n_kv_heads * LinearState(c.head_dim, kv.centroid_count()).bytes();
  return bytes;
}

}  // namespace slake::server
