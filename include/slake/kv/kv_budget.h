// Per-layer cache budgets from layer preference scores (algorithm.md §2.5, CAKE eq. 7 with the
// reference code's integerisation).
#pragma once
#include <cstdint>
#include <vector>

#include "slake/kv/kv_policy.h"

namespace slake {

// Splits `total` tokens over the layers in proportion to `scores` (finite, >= 0; all zero means
// uniform): truncate to integers; clamp each to `cap` and spread the clamped excess evenly over
// the layers still below `cap` (remainder +1 to the lowest indices); then make the sum exactly
// `total`, adding to layers below `cap` or taking from layers above 1, evenly with the remainder
// at the lowest indices. Requires 0 <= total <= cap * scores.size().
std::vector<int64_t> allocate_budgets(const std::vector<double>& scores, int64_t total, int64_t cap);
// The same with a cap per layer (caps.size() == scores.size(); total <= the caps' sum).
std::vector<int64_t> allocate_budgets(const std::vector<double>& scores, int64_t total, const std::vector<int64_t>& caps);

// The budgets that are known before any layer is seen, `per` tokens per layer on average and at
// most `cap` each: uniform, or PyramidKV's (linear from the most at the first layer down to
// per / beta at the last, beta 20), both through allocate_budgets.
std::vector<int64_t> fixed_layer_budgets(bool pyramid, int n_layers, int64_t per, int64_t cap);

// Streaming's ranking of the token at `pos` among tokens before `horizon`: the kStreamingSinks
// sinks above every other token (the earliest best), then recency. Finite and distinct, also as a
// float.
constexpr int kStreamingSinks = 4;
inline double recency_score(int pos, int horizon) { return pos < kStreamingSinks ? horizon + (kStreamingSinks - pos) : pos; }

// A layer's statistics over the prompt's observing queries, as the layer preference reads them.
struct LayerWindowTerms {
  double entropy = 0.0, variance = 0.0;          // CAKE's Hn and Vr
  double vabs_tv_va = 0.0, vabs_entropy = 0.0;  // SLAKE's VABS terms (VABS allocators only)
};
// The layer preference score of policy `p` (allocator `a`) from its window terms (algorithm.md §2.4):
// CAKE's Hn^(1/tau1) Vr^(1/tau2), VABS's TV-VA^alpha En^beta (times Vr^delta for slake-wide), 1
// for allocators that do not prefer; 0 when not finite.
double layer_preference(const KvPolicyParams& p, KvAllocator a, const LayerWindowTerms& t);

// The prompt's cascade after layer scores.size() - 1 has been seen: the budgets (prefix tokens
// kept) of every layer seen so far, for a prompt of S tokens over n_layers layers. Preference
// allocators split (C - Sw) * n_layers over the seen layers by score (each keeps its prefix while
// they all fit); with `p.cascade`, budgets only shrink from `prev` (an evicted token cannot come
// back). The others take their fixed budgets. The CPU evictor and the device context both call it.
// `held`, when given (a chunk of a chunked prefill after the first, whose layers hold what earlier
// chunks kept): each seen layer's candidate rows, which cap its budget so that what it cannot use
// goes to the other layers.
std::vector<int64_t> cascade_budgets(const KvPolicyParams& p, KvAllocator a, int n_layers, int S,
                                     const std::vector<double>& scores, const std::vector<int64_t>& prev,
                                     const std::vector<int64_t>* held = nullptr);

}  // namespace slake
