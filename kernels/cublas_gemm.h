// The one place cuBLAS is called: a row-major GEMM with fp32 output and fp32 accumulation
// (cublasGemmEx, CUBLAS_COMPUTE_32F: tensor cores for f16/bf16 inputs, no TF32 for f32 inputs).
//
// Layout convention. The engine stores matrices row-major; cuBLAS reads them column-major. A
// row-major X[r][c] with leading dimension ld is, read column-major with the same ld, X^T. So
//   row-major  C = op(A) op(B)          (C: m x n, op(A): m x k, op(B): k x n)
// is computed as
//   column-major  C^T = op(B)^T op(A)^T  = cublasGemmEx(op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc)
// with the transpose flags carried over unchanged. lda/ldb/ldc are row-major row strides in
// elements: A is stored [m][lda] (or [k][lda] when trans_a), B [k][ldb] (or [n][ldb]), C [m][ldc].
// Only built with nvcc (library slake-cuda-kernels); tested on a GPU only.
#pragma once
#include "kernels.h"

struct cublasContext;

namespace slake::gpu {

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cublasContext* handle() const { return handle_; }

 private:
  cublasContext* handle_ = nullptr;
};

struct GemmOperand {
  const void* data;
  ElemType type;  // F32, F16 or BF16 (A and B must have the same type)
  int ld;         // row stride, in elements
  bool trans;     // use the transpose of the stored matrix
};

// C = alpha * op(A) op(B) + beta * C, row-major, C fp32.
void gemm_rowmajor(const Blas& blas, int m, int n, int k, float alpha, const GemmOperand& a, const GemmOperand& b, float beta,
                   float* c, int ldc, Stream stream = nullptr);

// The prefill absorption's product for one KV head: M (d x d, row-major) += K^T V over `count`
// evicted rows of K and V (fp32, `row_stride` floats apart). The sums and the count are added by
// linear_state_sums (kernels.h).
void absorb_gemm(const Blas& blas, float* M, const float* k, const float* v, int count, int head_dim, int row_stride,
                 Stream stream = nullptr);

}  // namespace slake::gpu
