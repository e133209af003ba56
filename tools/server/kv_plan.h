// The KV memory a request will need, known before it starts, so that admission can hold requests
// back rather than run out of memory: the exact cache it can grow to plus the linear states.
//   full (no eviction): every token it will hold, min(n_ctx, history + prompt + max_tokens);
//   evicting with budget C and window Sw: each layer keeps at most its budget plus the window plus
//     the token being decoded, and the budgets sum to L * (C - Sw); during the prefill the layer
//     being computed holds the whole prompt before it is cut down (cascading). So at most
//     L * (C + 1) + S token-layers, never more than the full cache; plus one linear state per
//     layer and KV head when evicted tokens are compensated (taylor), plus, with a recall store,
//     its bytes for every token in every layer and KV head (what is evicted moves there).
#pragma once
#include <cstddef>

#include "slake/kv/kv_policy.h"
#include "slake/model/model.h"

namespace slake::server {

// Bytes of KV cache for a sequence that ends up with `tokens` tokens (prompt and reply) after a
// prompt of `prompt` tokens, in a context of n_ctx.
size_t planned_kv_bytes(const ModelConfig& c, const KvPolicyParams& kv, int n_ctx, long long tokens, long long prompt);

}  // namespace slake::server
