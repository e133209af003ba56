#include "slake/cpu/rope.h"

#include <algorithm>
#include <cmath>

namespace slake {

Rope::Rope(const ModelConfig& cfg, int n_ctx) : head_dim_(cfg.head_dim), layout_(cfg.rope_layout), mscale_(cfg.rope_attn_factor) {
  const int half = head_dim_ / 2;
  const std::vector<float>& factors = cfg.rope_factors_for(n_ctx);
  inv_freq_.resize(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(cfg.rope_theta), -2.0 * i / head_dim_);
    if (!factors.empty()) f /= factors[static_cast<size_t>(i)];
    inv_freq_[static_cast<size_t>(i)] = f;
  }
  if (!cfg.swa_layers.empty())
    for (int i = 0; i < half; ++i) inv_freq_swa_.push_back(std::pow(static_cast<double>(cfg.rope_theta_swa), -2.0 * i / head_dim_));
}

void Rope::apply(float* x, int n_heads, int pos, bool swa) const {
  const int half = head_dim_ / 2;
  const std::vector<double>& inv_freq = swa ? inv_freq_swa_ : inv_freq_;
  float cs[512], sn[512];  // frequencies are handled 512 at a time
  for (int i0 = 0; i0 < half; i0 += 512) {
    const int n = std::min(512, half - i0);
    for (int i = 0; i < n; ++i) {
      const double a = pos * inv_freq[static_cast<size_t>(i0 + i)];
      cs[i] = static_cast<float>(std::cos(a)) * mscale_;
      sn[i] = static_cast<float>(std::sin(a)) * mscale_;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<size_t>(h) * head_dim_;
      for (int i = 0; i < n; ++i) {
        const int j = i0 + i;
        const int a = layout_ == RopeLayout::Adjacent ? 2 * j : j;
        const int b = layout_ == RopeLayout::Adjacent ? 2 * j + 1 : j + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

}  // namespace slake
