// PTAA (algorithm.md §4): attention of one query over the retained exact cache R plus the linear
// state of the evicted tokens, exp(x_j) ~ exp(mu) (1 + x_j - mu) around their mean score mu.
// The running maximum includes mu, so lambda = exp(mu - m*) <= 1 and nothing overflows when the
// evicted keys score higher than the retained ones.
#pragma once
#include <cstdint>

#include "slake/kv/kv_cache.h"
#include "slake/kv/kv_recall.h"
#include "slake/kv/linear_cache.h"

namespace slake {

// out (head_dim) for query q (head_dim, after RoPE) at position qpos over the keys of `kv` visible
// from qpos (causal; sliding window if > 0) and the evicted tokens summarised by `lin`.
// With lin.n == 0 this is exact softmax attention.
// softcap: ptaa_finish's.
void ptaa_one(float* out, const float* q, int32_t qpos, const KvHead& kv, const LinearState& lin, int head_dim,
              int sliding_window, float softcap = 0.0f);

// PTAA of one query head from the exact part over its retained keys, as attend_rows
// (attention_rows.h) gives it: m = max visible score, l = sum exp(x_j - m), acc = sum exp(x_j - m) v_j.
// With m* = max(m, mu), the retained keys weigh exp(m - m*) and the linear state lam = exp(mu - m*):
// out = (exp(m - m*) acc + lam ((1 - mu) vsum + q^T M / sqrt(d))) / (exp(m - m*) l + lam n).
// With lin.n == 0 it is acc / l; with nothing visible and nothing evicted, zeros.
// A centroid state (lin.centroids > 0) adds its K merged tokens to the softmax instead: each weighs
// cn[c] exp(q . ck[c] / (cn[c] sqrt d)) and brings cv[c] / cn[c] (algorithm.md §4.2).
// With `cover` (the exact part includes tokens recalled from the store, which the Taylor state also
// holds): the Taylor state stands for the evicted tokens less the recalled ones, n - cover.n tokens
// with q . ksum / sqrt(d) - cover.sx, vsum - cover.vs and q^T M / sqrt(d) - cover.xv
// (algorithm.md §9.3). The centroid state takes no cover.
// Soft-capped logits (softcap > 0; m, l and acc of the capped logits): the evicted tokens'
// exp(f(x)), f(x) = softcap * tanh(x / softcap), is expanded around their mean raw logit x̄ by the
// chain rule, exp(f(x)) ~ exp(f(x̄)) (1 + g (x - x̄)) with g = f'(x̄) = 1 - tanh^2(x̄ / softcap):
// mu above is f(x̄), the vsum term (1 - g x̄) and the M term g q^T M / sqrt(d) (softcap 0: g = 1,
// f(x̄) = x̄, the formula above). A centroid's logit is capped as a token's.
void ptaa_finish(float* out, const float* q, float m, float l, const float* acc, const LinearState& lin, int head_dim,
                 float softcap = 0.0f, const RecallCover* cover = nullptr);

}  // namespace slake
