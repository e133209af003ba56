#include "cublas_gemm.h"

#include <cublas_v2.h>

#include <string>

#include "device_memory.h"

namespace slake::gpu {

namespace {
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string(what) + ": " + cublasGetStatusString(s));
}
cudaDataType_t cuda_type(ElemType t) {
  switch (t) {
    case ElemType::F16: return CUDA_R_16F;
    case ElemType::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}
}  // namespace

Blas::Blas() { check(cublasCreate(&handle_), "cublasCreate"); }
Blas::~Blas() { cublasDestroy(handle_); }

void gemm_rowmajor(const Blas& blas, int m, int n, int k, float alpha, const GemmOperand& a, const GemmOperand& b, float beta,
                   float* c, int ldc, Stream stream) {
  if (a.type != b.type) throw Error("gemm_rowmajor: A and B of different types");
  if (m <= 0 || n <= 0) return;
  check(cublasSetStream(blas.handle(), stream), "cublasSetStream");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands (header).
  check(cublasGemmEx(blas.handle(), b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                     b.data, cuda_type(b.type), b.ld, a.data, cuda_type(a.type), a.ld, &beta, c, CUDA_R_32F, ldc,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void absorb_gemm(const Blas& blas, float* M, const float* k, const float* v, int count, int head_dim, int row_stride,
                 Stream stream) {
  if (count <= 0) return;
  // M[i][j] += sum_t K[t][i] V[t][j]: op(A) = K^T (K stored [count][row_stride]), op(B) = V.
  gemm_rowmajor(blas, head_dim, head_dim, count, 1.0f, GemmOperand{k, ElemType::F32, row_stride, true},
                GemmOperand{v, ElemType::F32, row_stride, false}, 1.0f, M, head_dim, stream);
}

}  // namespace slake::gpu
