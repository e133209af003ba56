// RMSNorm: one block per row; the sum of squares is a block reduction in fp32.
#pragma once
#include "common.cuh"

namespace slake::gpu {

__global__ void rmsnorm_kernel(float* out, const float* x, const float* weight, int n, float eps) {
  SLAKE_SHARED(float, scratch, 32);
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* o = out + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) ss += xr[i] * xr[i];
  ss = block_sum(ss, scratch);
  const float scale = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) o[i] = weight[i] * (xr[i] * scale);
}

void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps, Stream stream) {
  if (rows <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream, rmsnorm_kernel)(out, x, weight, n, eps);
  SLAKE_CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace slake::gpu
