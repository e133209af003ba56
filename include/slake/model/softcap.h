// Logit soft-capping (Gemma 2's attention and output logits): x -> cap * tanh(x / cap), which
// keeps every logit inside (-cap, cap) and leaves small ones almost unchanged. A cap of 0 means
// none. The CUDA kernels' twin is soft_cap in kernels/common.cuh.
#pragma once
#include <cmath>
#include <cstddef>

namespace slake {

inline float soft_cap(float x, float cap) { return cap > 0.0f ? cap * std::tanh(x / cap) : x; }
inline double soft_cap(double x, double cap) { return cap > 0.0 ? cap * std::tanh(x / cap) : x; }

// The slope of soft_cap at x, 1 - tanh^2(x / cap) (1 without a cap): the Taylor state's expansion
// of exp(soft_cap(x)) around the evicted tokens' mean raw logit (ptaa.h). The kernels' twin is
// cap_slope in kernels/common.cuh.
template <class T>
inline T soft_cap_slope(T x, T cap) {
  if (!(cap > T(0))) return T(1);
  const T t = std::tanh(x / cap);
  return T(1) - t * t;
}

// soft_cap over n values in place.
inline void soft_cap_all(float* x, size_t n, float cap) {
  if (cap > 0.0f)
    for (size_t i = 0; i < n; ++i) x[i] = soft_cap(x[i], cap);
}

}  // namespace slake
