#include "slake/kv/kv_budget.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "slake/error.h"

namespace slake {

namespace {
constexpr double kPyramidBeta = 20.0;

// Moves `amount` (> 0 to add, < 0 to take) over the layers that can move, evenly, the remainder
// going to the lowest indices; layer l stays within [floor_v, cap[l]]. Repeats until all is placed.
void spread(std::vector<int64_t>& b, int64_t amount, int64_t floor_v, const std::vector<int64_t>& caps) {
  const bool adding = amount > 0;
  int64_t left = adding ? amount : -amount;
  while (left > 0) {
    std::vector<size_t> open;
    for (size_t l = 0; l < b.size(); ++l)
      if (adding ? b[l] < caps[l] : b[l] > floor_v) open.push_back(l);
    if (open.empty()) fail("internal: budgets cannot absorb " + std::to_string(adding ? left : -left) + " tokens");
    const int64_t k = static_cast<int64_t>(open.size()), share = left / k, rem = left % k;
    for (int64_t i = 0; i < k; ++i) {
      int64_t& x = b[open[static_cast<size_t>(i)]];
      const int64_t want = share + (i < rem ? 1 : 0);
      const int64_t room = adding ? caps[open[static_cast<size_t>(i)]] - x : x - floor_v;
      const int64_t moved = want < room ? want : room;
      x += adding ? moved : -moved;
      left -= moved;
    }
  }
}

}  // namespace

std::vector<int64_t> allocate_budgets(const std::vector<double>& scores, int64_t total, int64_t cap) {
  if (scores.empty()) fail("allocate_budgets: no layers");
  return allocate_budgets(scores, total, std::vector<int64_t>(scores.size(), cap));
}

std::vector<int64_t> allocate_budgets(const std::vector<double>& scores, int64_t total, const std::vector<int64_t>& caps) {
  const size_t L = scores.size();
  if (L == 0) fail("allocate_budgets: no layers");
  if (caps.size() != L) fail("allocate_budgets: one cap per layer");
  int64_t room = 0;
  for (int64_t c : caps) {
    if (c < 0) fail("allocate_budgets: a negative cap");
    room += c;
  }
  if (total < 0 || total > room)
    fail("allocate_budgets: " + std::to_string(total) + " tokens cannot be split over " + std::to_string(L) +
         " layers of at most " + std::to_string(room) + " in all");
  double sum = 0;
  for (double s : scores) {
    if (!(s >= 0) || !std::isfinite(s)) fail("allocate_budgets: layer score " + std::to_string(s) + " is not a finite non-negative number");
    sum += s;
  }
  std::vector<int64_t> b(L);
  for (size_t l = 0; l < L; ++l)
    b[l] = sum > 0 ? static_cast<int64_t>(scores[l] / sum * static_cast<double>(total)) : total / static_cast<int64_t>(L);
  int64_t excess = 0;
  for (size_t l = 0; l < L; ++l)
    if (b[l] > caps[l]) excess += b[l] - caps[l], b[l] = caps[l];
  spread(b, excess, 1, caps);
  const int64_t diff = total - std::accumulate(b.begin(), b.end(), int64_t{0});
  spread(b, diff, diff < 0 ? 1 : 0, caps);
  return b;
}

std::vector<int64_t> fixed_layer_budgets(bool pyramid, int n_layers, int64_t per, int64_t cap) {
  const int64_t total = per * n_layers;
  if (!pyramid || n_layers == 1)
    return allocate_budgets(std::vector<double>(static_cast<size_t>(n_layers), 1.0), total, cap);
  const double lo = per / kPyramidBeta, hi = 2.0 * per - lo;
  std::vector<double> w(static_cast<size_t>(n_layers));
  for (int l = 0; l < n_layers; ++l) w[static_cast<size_t>(l)] = hi - l * (hi - lo) / (n_layers - 1);
  return allocate_budgets(w, total, cap);
}

double layer_preference(const KvPolicyParams& p, KvAllocator a, const LayerWindowTerms& t) {
  double score = 1.0;
  if (a == KvAllocator::Cake) score = std::pow(t.entropy, 1.0 / p.tau1.value_or(1.0)) * std::pow(t.variance, 1.0 / p.tau2.value_or(1.0));
  if (a == KvAllocator::Vabs || a == KvAllocator::VabsVariance) {
    score = std::pow(t.vabs_tv_va, p.alpha.value_or(0.5)) * std::pow(t.vabs_entropy, p.beta.value_or(0.4));
    if (a == KvAllocator::VabsVariance) score *= std::pow(t.variance, p.delta);
  }
  return std::isfinite(score) ? score : 0.0;
}

std::vector<int64_t> cascade_budgets(const KvPolicyParams& p, KvAllocator a, int n_layers, int S,
                                     const std::vector<double>& scores, const std::vector<int64_t>& prev,
                                     const std::vector<int64_t>* held) {
  const size_t seen = scores.size();
  const int64_t per = p.budget - p.window, cap = S - p.window;
  std::vector<int64_t> b;
  if (by_preference(a)) {
    // Over the layers seen so far the same total (algorithm.md §2.6); while they all fit, each
    // keeps its prefix.
    const int64_t total = per * n_layers;
    std::vector<int64_t> caps(seen, cap);
    if (held)
      for (size_t l = 0; l < seen && l < held->size(); ++l) caps[l] = std::min(cap, (*held)[l]);
    const int64_t room = std::accumulate(caps.begin(), caps.end(), int64_t{0});
    b = total >= room ? caps : allocate_budgets(scores, total, caps);
    if (p.cascade)
      for (size_t l = 0; l < prev.size() && l < seen; ++l) b[l] = std::min(b[l], prev[l]);
  } else {
    b = fixed_layer_budgets(a != KvAllocator::Uniform, n_layers, per, cap);
    b.resize(seen);
  }
  return b;
}

}  // namespace slake
