// CPU reference of the residual add (the CPU forward pass adds inline; this is the same loop).
#pragma once
#include <cstdint>

namespace slake::gpu::reference {

inline void residual_add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace slake::gpu::reference
