// SwiGLU: out = silu(gate) * up, elementwise, grid-stride.
#pragma once
#include "common.cuh"

namespace slake::gpu {

__global__ void swiglu_kernel(float* out, const float* gate, const float* up, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// GeGLU: out = gelu(gate) * up with GELU's tanh approximation (slake::geglu), grid-stride.
__global__ void geglu_kernel(float* out, const float* gate, const float* up, int64_t n) {
  constexpr float k = 2 * 0.7978845608028654f;  // 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), as the CPU computes it
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-k * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void geglu(float* out, const float* gate, const float* up, int64_t n, Stream stream) {
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, geglu_kernel)(out, gate, up, n);
  SLAKE_CHECK_LAUNCH("geglu_kernel");
}

void swiglu(float* out, const float* gate, const float* up, int64_t n, Stream stream) {
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, swiglu_kernel)(out, gate, up, n);
  SLAKE_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace slake::gpu
