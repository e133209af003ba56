// Rotary position embedding in either pairing layout, with per-frequency divisors
// (Llama 3.1 scaling, linear scaling). Angles are computed in double precision.
#pragma once
#include <vector>

#include "slake/model/model.h"

namespace slake {

class Rope {
 public:
  explicit Rope(const ModelConfig& cfg);
  // Rotates `n_heads` consecutive heads of `x` (each head_dim long) for position `pos`.
  void apply(float* x, int n_heads, int pos) const;
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  int head_dim_;
  RopeLayout layout_;
  std::vector<double> inv_freq_;
};

}  // namespace slake
