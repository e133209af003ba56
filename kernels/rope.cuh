// RoPE in either pairing layout. Angles are computed in double, like the CPU path (slake::Rope),
// so long positions lose no precision; the rotation itself is fp32.
#pragma once
#include "common.cuh"

namespace slake::gpu {

// Block (token); threads stride over (head, frequency) pairs.
__global__ void rope_kernel(float* x, const int32_t* pos, int64_t row_stride, int n_heads, int head_dim,
                            const double* inv_freq, int half_layout, float mscale) {
  const int half = head_dim / 2;
  float* row = x + static_cast<int64_t>(blockIdx.x) * row_stride;
  const double p = static_cast<double>(pos[blockIdx.x]);
  for (int w = static_cast<int>(threadIdx.x); w < n_heads * half; w += static_cast<int>(blockDim.x)) {
    const int h = w / half, j = w % half;
    const double angle = p * inv_freq[j];
    const float c = static_cast<float>(cos(angle)) * mscale, s = static_cast<float>(sin(angle)) * mscale;
    float* v = row + static_cast<int64_t>(h) * head_dim;
    const int a = half_layout ? j : 2 * j, b = half_layout ? j + half : 2 * j + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

void rope(float* x, const int32_t* pos, int n_tokens, int64_t row_stride, int n_heads, int head_dim, const double* inv_freq,
          bool half_layout, float mscale, Stream stream) {
  if (n_tokens <= 0) return;
  SLAKE_LAUNCH(dim3(static_cast<unsigned>(n_tokens)), dim3(128), 0, stream, rope_kernel)
  (x, pos, row_stride, n_heads, head_dim, inv_freq, half_layout ? 1 : 0, mscale);
  SLAKE_CHECK_LAUNCH("rope_kernel");
}

}  // namespace slake::gpu
