// CPU reference of the mixture's row gather and weighted scatter-add (the CPU forward pass does
// the same inline in CpuLayerOps::moe_ffn).
#pragma once
#include <cstdint>

namespace slake::gpu::reference {

inline void gather_rows(float* out, const float* in, const int32_t* idx, int m, int64_t width) {
  for (int r = 0; r < m; ++r)
    for (int64_t j = 0; j < width; ++j) out[r * width + j] = in[idx[r] * width + j];
}

inline void scatter_add_rows(float* acc, const float* y, const int32_t* idx, const float* w, int m, int64_t width) {
  for (int r = 0; r < m; ++r)
    for (int64_t j = 0; j < width; ++j) acc[idx[r] * width + j] += w[r] * y[r * width + j];
}

}  // namespace slake::gpu::reference
