#include "slake/model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace slake {

void moe_route(const float* logits, int n_expert, int n_used, bool renormalise, ExpertChoice* out) {
  const float mx = *std::max_element(logits, logits + n_expert);
  std::vector<float> p(static_cast<size_t>(n_expert));
  float sum = 0.0f;
  for (int e = 0; e < n_expert; ++e) sum += p[static_cast<size_t>(e)] = std::exp(logits[e] - mx);
  for (float& x : p) x /= sum;
  std::vector<int> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n_used, order.end(), [&](int a, int b) {
    return p[static_cast<size_t>(a)] != p[static_cast<size_t>(b)] ? p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] : a < b;
  });
  float chosen = 0.0f;
  for (int k = 0; k < n_used; ++k) chosen += p[static_cast<size_t>(order[static_cast<size_t>(k)])];
  for (int k = 0; k < n_used; ++k) {
    const int e = order[static_cast<size_t>(k)];
    out[k] = {e, renormalise ? p[static_cast<size_t>(e)] / chosen : p[static_cast<size_t>(e)]};
  }
}

}  // namespace slake
