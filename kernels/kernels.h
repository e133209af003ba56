// The host API of the CUDA kernels: one launcher per kernel, all pointers device pointers, all
// launches asynchronous on `stream`. The same declarations are implemented twice: by nvcc
// (kernels.cu, library slake-cuda-kernels) and by the host compiler on the block executor
// (emu/kernels_emu.cpp, library slake-kernels-emu). Math and accumulation are fp32.
#pragma once
#include <cstdint>

#include "cuda_compat.h"

namespace slake::gpu {

// Element types of tables the kernels read (values as in slake::DType).
enum class ElemType : int { F32 = 0, F16 = 1, BF16 = 30 };

// ---- elementwise (embedding.cuh, rmsnorm.cuh, rope.cuh, swiglu.cuh, residual.cuh) ----

// out[t][:] = table row tokens[t] (dim elements of `type`), as fp32.
void embedding(float* out, const void* table, ElemType type, const int32_t* tokens, int n_tokens, int dim,
               Stream stream = nullptr);
// out[r][i] = x[r][i] / rms(x[r]) * weight[i] for r < rows, i < n.
void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps, Stream stream = nullptr);
// Rotates, in place, n_heads heads (head_dim each, consecutive) of each of n_tokens rows of x
// (row t starts at x + t * row_stride) for position pos[t]. inv_freq: head_dim / 2 doubles (the
// frequencies with any Llama 3.1 / linear scaling already divided in, as slake::Rope::inv_freq()).
// half_layout: pairs (i, i + d/2) (Hugging Face); otherwise adjacent pairs (2i, 2i+1) (GGUF).
void rope(float* x, const int32_t* pos, int n_tokens, int64_t row_stride, int n_heads, int head_dim,
          const double* inv_freq, bool half_layout, Stream stream = nullptr);
// out[i] = silu(gate[i]) * up[i]
void swiglu(float* out, const float* gate, const float* up, int64_t n, Stream stream = nullptr);
// x[i] += y[i]
void residual_add(float* x, const float* y, int64_t n, Stream stream = nullptr);

}  // namespace slake::gpu
