// Continuous batching on the CPU: one decode step of several sequences at once. Each sequence keeps
// its own Context (KV cache, evictor, linear states); the step stacks one activation row per
// sequence, so every matmul reads the weights once for all of them, while RoPE, the KV append,
// decode eviction and attention run per context, exactly as Context::eval runs them for one token.
// The logits of each sequence equal what ctx->eval({token}, &logits) would give it alone: up to
// kMatmulExactRows (ops.h) sequences share each matmul call, so every row is computed as a
// one-row product.
//
// prefill_shared puts one prompt into several empty contexts that differ only in their eviction
// policy: the forward pass runs once, and every context's cache takes the same keys and values,
// its evictor observes the same queries and evicts after each layer as its own prefill would.
// Prefill eviction happens once a layer has seen the whole prompt, so the prompt's activations do
// not depend on the policy, and each context ends as it would after eval(tokens) alone.
#pragma once
#include <cstdint>
#include <vector>

#include "slake/context.h"

namespace slake {

// Evaluates tokens[i] at position ctxs[i]->n_past() in ctxs[i], for every i, and writes that
// sequence's logits ([n_vocab]) into (*logits)[i] when logits is not null. The contexts must be
// distinct, share one model and one thread pool (ContextParams::pool; the step runs on it), and
// each must hold a prompt already (n_past() > 0: this is the decode path) with room for one more
// token. Throws slake::Error otherwise, before anything is changed.
void decode_batch(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens,
                  std::vector<std::vector<float>>* logits);

// Evaluates `tokens` as a prompt into every context of ctxs and writes the last token's logits
// ([n_vocab], the same for all) into *logits when it is not null. The contexts must be distinct,
// empty, share one model and one thread pool, and agree on the cache types and the chunk size
// (n_batch), which the prompt's observation depends on. Throws slake::Error otherwise, before
// anything is changed.
void prefill_shared(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens, std::vector<float>* logits);

}  // namespace slake
