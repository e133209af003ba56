// The rows of one expert of a mixture (slake::LayerOps::moe_ffn): its tokens' rows gathered into
// a dense block for the expert's GEMMs, and its outputs added back to their rows in their weights.
// Within one expert each row index occurs once, so the scatter has no two writers of a row.
#pragma once
#include "common.cuh"

namespace slake::gpu {

// Grid-stride over m * width elements.
__global__ void gather_rows_kernel(float* out, const float* in, const int32_t* idx, int64_t m, int64_t width) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * width; i += stride)
    out[i] = in[static_cast<int64_t>(idx[i / width]) * width + i % width];
}

void gather_rows(float* out, const float* in, const int32_t* idx, int m, int64_t width, Stream stream) {
  const int64_t n = static_cast<int64_t>(m) * width;
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, gather_rows_kernel)(out, in, idx, m, width);
  SLAKE_CHECK_LAUNCH("gather_rows_kernel");
}

__global__ void scatter_add_rows_kernel(float* acc, const float* y, const int32_t* idx, const float* w, int64_t m, int64_t width) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * width; i += stride) {
    const int64_t r = i / width;
    acc[static_cast<int64_t>(idx[r]) * width + i % width] += w[r] * y[i];
  }
}

void scatter_add_rows(float* acc, const float* y, const int32_t* idx, const float* w, int m, int64_t width, Stream stream) {
  const int64_t n = static_cast<int64_t>(m) * width;
  if (n <= 0) return;
  SLAKE_LAUNCH(dim3(elementwise_blocks(n, 256)), dim3(256), 0, stream, scatter_add_rows_kernel)(acc, y, idx, w, m, width);
  SLAKE_CHECK_LAUNCH("scatter_add_rows_kernel");
}

}  // namespace slake::gpu
