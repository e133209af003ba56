// Logit soft-capping (Gemma 2's attention and output logits): x -> cap * tanh(x / cap), which
// keeps every logit inside (-cap, cap) and leaves small ones almost unchanged. A cap of 0 means
// none. The CUDA kernels' twin is soft_cap in kernels/common.cuh.
#pragma once
#include <cmath>
#include <cstddef>

namespace slake {

inline float soft_cap(float x, float cap) { return cap > 0.0f ? cap * std::tanh(x / cap) : x; }
inline double soft_cap(double x, double cap) { return cap > 0.0 ? cap * std::tanh(x / cap) : x; }

// soft_cap over n values in place.
inline void soft_cap_all(float* x, size_t n, float cap) {
  if (cap > 0.0f)
    for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace slake
