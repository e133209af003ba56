// The CUDA build's GEMM: activations rounded to bf16 on the device, then cublasGemmEx (bf16 x bf16,
// fp32 accumulation and output) in the row-major convention of cublas_gemm.h.
#include "cublas_gemm.h"
#include "gemm.h"

namespace slake::gpu {

namespace {
class CublasGemm final : public Gemm {
 public:
  void matmul(float* y, const float* x, int n, const DeviceMatrix& w, uint16_t* act, Stream stream) override {
    if (n <= 0) return;
    to_bf16(act, x, static_cast<int64_t>(n) * w.cols, stream);
    // y (n x rows) = act (n x cols) . W^T, W stored [rows][cols].
    gemm_rowmajor(blas_, n, w.rows, w.cols, 1.0f, GemmOperand{act, ElemType::BF16, w.cols, false},
                  GemmOperand{w.data, ElemType::BF16, w.cols, true}, 0.0f, y, w.rows, stream);
  }
  const char* name() const override { return "cuBLAS"; }

 private:
  Blas blas_;
};
}  // namespace

std::unique_ptr<Gemm> make_gemm() { return std::make_unique<CublasGemm>(); }

}  // namespace slake::gpu
