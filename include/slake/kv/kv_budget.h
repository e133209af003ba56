// Per-layer cache budgets from layer preference scores (spec section 2.5, CAKE eq. 7 with the
// reference code's integerisation).
#pragma once
#include <cstdint>
#include <vector>

namespace slake {

// Splits `total` tokens over the layers in proportion to `scores` (finite, >= 0; all zero means
// uniform): truncate to integers; clamp each to `cap` and spread the clamped excess evenly over
// the layers still below `cap` (remainder +1 to the lowest indices); then make the sum exactly
// `total`, adding to layers below `cap` or taking from layers above 1, evenly with the remainder
// at the lowest indices. Requires 0 <= total <= cap * scores.size().
std::vector<int64_t> allocate_budgets(const std::vector<double>& scores, int64_t total, int64_t cap);

// The budgets that are known before any layer is seen, `per` tokens per layer on average and at
// most `cap` each: uniform, or PyramidKV's (linear from the most at the first layer down to
// per / beta at the last, beta 20), both through allocate_budgets.
std::vector<int64_t> fixed_layer_budgets(bool pyramid, int n_layers, int64_t per, int64_t cap);

}  // namespace slake
