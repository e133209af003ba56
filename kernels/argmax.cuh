// Argmax per row (greedy decoding): the largest value, the lowest index among equal ones, as
// std::max_element (slake::argmax).
#pragma once
#include "common.cuh"

namespace slake::gpu {

__device__ __forceinline__ void better_of(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}

// Block per row, 256 threads.
__global__ void argmax_kernel(int32_t* out, const float* x, int n) {
  SLAKE_SHARED(float, wv, 32);
  SLAKE_SHARED(int, wi, 32);
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  float v = -INFINITY;
  int i = n;  // no candidate yet: loses every tie
  for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) better_of(v, i, row[j], j);
  for (int o = 16; o > 0; o /= 2) {
    const float v2 = __shfl_xor_sync(kFullMask, v, o);
    const int i2 = __shfl_xor_sync(kFullMask, i, o);
    better_of(v, i, v2, i2);
  }
  if (lane == 0) wv[warp] = v, wi[warp] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x) / 32; ++w) better_of(v, i, wv[w], wi[w]);
    out[blockIdx.x] = i < n ? i : 0;  // a row of -inf only: index 0, as max_element
  }
}

void argmax(int32_t* out, const float* x, int rows, int n, Stream stream) {
  if (rows <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream, argmax_kernel)(out, x, n);
  SLAKE_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace slake::gpu
