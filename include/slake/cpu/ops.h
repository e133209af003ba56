// CPU kernels of the forward pass (fp32 math). Weights of any supported type are read row by row
// and dequantised on the fly, so no tensor is ever expanded whole.
#pragma once
#include <cstdint>

#include "slake/model/model.h"
#include "slake/cpu/thread_pool.h"

namespace slake {

float dot_f32(const float* a, const float* b, int64_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, int64_t n);

// out[i] = x[i] / rms(x) * w[i]; w is a 1-D weight of any type.
void rmsnorm(float* out, const float* x, const TensorView& w, int64_t n, float eps);
void rmsnorm_rows(float* out, const float* x, const TensorView& w, int64_t rows, int64_t n, float eps, ThreadPool& pool);

// out[t][r] = W[r] . x[t] for t < n_tokens, r < W.n_rows(); x rows are W.row_len() long.
// Up to kMatmulExactRows tokens, every row of out is computed exactly as a one-token product would
// (the same tile kernels, the same order of sums); from 16 on, the panel and AMX kernels may round
// differently. Batched decoding (batch_decode.h) relies on this.
constexpr int64_t kMatmulExactRows = 15;
void matmul(float* out, const float* x, int64_t n_tokens, const TensorView& W, ThreadPool& pool);

// out[t] = silu(gate[t]) * up[t], elementwise over n values.
void swiglu(float* out, const float* gate, const float* up, int64_t n);
// out[t] = gelu(gate[t]) * up[t] with GELU's tanh approximation, elementwise over n values.
void geglu(float* out, const float* gate, const float* up, int64_t n);
// x[r] += b for each of `rows` rows of n floats (b: a 1-D weight of n elements, any type).
void add_bias_rows(float* x, const TensorView& b, int64_t rows, int64_t n);

// Row `token` of an embedding table in any layout (weight_pack.h), dequantised; a token outside
// the table is refused.
void embedding_row(float* out, const TensorView& emb, int64_t token);
// The n tokens' embedding rows (dim floats each) into x, times the model's embed_scale, from the
// table the CPU weights name (cpu_weights.h: a tied output's repacked copy, else the model's).
void embed_tokens(float* x, const Model& m, const int32_t* tokens, int64_t n);

}  // namespace slake
