#include "cublas_gemm.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "device_memory.h"

namespace slake::gpu {

namespace {
// cuBLAS is opened on first use (dlopen), not linked: loading libcublas/libcublasLt costs about
// 150 MB of resident memory (their relocated data), which every process of a CUDA build would
// otherwise pay on the CPU backend too. The few entry points used are looked up once.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                            cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  const char* (*status_string)(cublasStatus_t) = nullptr;
};

const CublasApi& cublas() {
  static const CublasApi api = [] {
    const std::string lib = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) throw Error("cannot load cuBLAS (" + lib + "): " + std::string(dlerror()));
    auto sym = [h](const char* name) {
      void* f = dlsym(h, name);
      if (!f) throw Error(std::string("cuBLAS has no ") + name);
      return f;
    };
    CublasApi a;
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
    a.status_string = reinterpret_cast<decltype(a.status_string)>(sym("cublasGetStatusString"));
    return a;
  }();
  return api;
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string(what) + ": " + cublas().status_string(s));
}
cudaDataType_t cuda_type(ElemType t) {
  switch (t) {
    case ElemType::F16: return CUDA_R_16F;
    case ElemType::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}
}  // namespace

Blas::Blas() { check(cublas().create(&handle_), "cublasCreate"); }
Blas::~Blas() { cublas().destroy(handle_); }

void gemm_rowmajor(const Blas& blas, int m, int n, int k, float alpha, const GemmOperand& a, const GemmOperand& b, float beta,
                   float* c, int ldc, Stream stream) {
  if (a.type != b.type) throw Error("gemm_rowmajor: A and B of different types");
  if (m <= 0 || n <= 0) return;
  check(cublas().set_stream(blas.handle(), stream), "cublasSetStream");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands (header).
  check(cublas().gemm_ex(blas.handle(), b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
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
