// Embedding lookup: one block per token, threads stride over the row; F32, F16 and BF16 tables;
// each value times `scale` (Gemma's sqrt(dim); 1 leaves it as stored).
#pragma once
#include "common.cuh"

namespace slake::gpu {

template <ElemType T>
__global__ void embedding_kernel(float* out, const void* table, const int32_t* tokens, int dim, float scale) {
  const int t = static_cast<int>(blockIdx.x);
  const int64_t row = static_cast<int64_t>(tokens[t]) * dim;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x)) {
    const float e = load_elem<T>(table, row + i);
    out[static_cast<int64_t>(t) * dim + i] = scale == 1.0f ? e : e * scale;
  }
}

void embedding(float* out, const void* table, ElemType type, const int32_t* tokens, int n_tokens, int dim, float scale,
               Stream stream) {
  if (n_tokens <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens)), block(256);
  switch (type) {
    case ElemType::F32: SLAKE_LAUNCH(grid, block, 0, stream, embedding_kernel<ElemType::F32>)(out, table, tokens, dim, scale); break;
    case ElemType::F16: SLAKE_LAUNCH(grid, block, 0, stream, embedding_kernel<ElemType::F16>)(out, table, tokens, dim, scale); break;
    case ElemType::BF16: SLAKE_LAUNCH(grid, block, 0, stream, embedding_kernel<ElemType::BF16>)(out, table, tokens, dim, scale); break;
    default: throw Error("embedding: a table of f32, f16 or bf16 rows only");
  }
  SLAKE_CHECK_LAUNCH("embedding_kernel");
}

}  // namespace slake::gpu
