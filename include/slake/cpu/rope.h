// Rotary position embedding in either pairing layout, with per-frequency divisors
// (Llama 3.1 scaling, linear scaling, LongRoPE) and LongRoPE's factor on cos and sin. Angles are
// computed in double precision. A model with
// local/global layers (ModelConfig::swa_layers) has a second table for its sliding layers.
#pragma once
#include <vector>

#include "slake/model/model.h"

namespace slake {

class Rope {
 public:
  // For a context of n_ctx tokens (which picks LongRoPE's short or long divisors).
  Rope(const ModelConfig& cfg, int n_ctx);
  // Rotates `n_heads` consecutive heads of `x` (each head_dim long) for position `pos`, with the
  // sliding layers' frequencies when `swa`.
  void apply(float* x, int n_heads, int pos, bool swa = false) const;
  const std::vector<double>& inv_freq(bool swa = false) const { return swa ? inv_freq_swa_ : inv_freq_; }
  // What cos and sin are multiplied by (ModelConfig::rope_attn_factor).
  float mscale() const { return mscale_; }

 private:
  int head_dim_;
  RopeLayout layout_;
  float mscale_;
  std::vector<double> inv_freq_, inv_freq_swa_;
};

}  // namespace slake
