// Residual add: x += y, elementwise, grid-stride; and a bias added to every row.
#pragma once
#include "common.cuh"

namespace slake::gpu {

__global__ void residual_add_kernel(float* x, const float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] += y[i];
}

void residual_add(float* x, const float* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, residual_add_kernel)(x, y, n);
  SLAKE_CHECK_LAUNCH("residual_add_kernel");
}

__global__ void bias_add_kernel(float* x, const float* b, int64_t n, int64_t width) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] += b[i % width];
}

void bias_add(float* x, const float* b, int rows, int64_t width, Stream stream) {
  const int64_t n = static_cast<int64_t>(rows) * width;
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, bias_add_kernel)(x, b, n, width);
  SLAKE_CHECK_LAUNCH("bias_add_kernel");
}

}  // namespace slake::gpu
