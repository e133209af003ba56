// The projections' and the FFN's matrix products on the device, behind one interface with two
// implementations: cuBLAS (gemm_cublas.cpp, library slake-backend-cuda: cublasGemmEx, bf16 inputs,
// fp32 accumulation and output) and a plain host loop for the emulated build (gemm_host.cpp,
// library slake-backend-emu), with the same convention and the same rounding of the activations.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels.h"

namespace slake::gpu {

// A weight matrix W[rows][cols] in bf16, row-major, on the device (GGUF's [out][in]).
struct DeviceMatrix {
  const uint16_t* data = nullptr;
  int rows = 0, cols = 0;
};

class Gemm {
 public:
  virtual ~Gemm() = default;
  // y[t][r] = sum_c bf16(x[t][c]) * W[r][c] for t < n, r < W.rows (fp32 accumulation; x and y
  // row-major fp32 on the device). `act` is scratch for n * W.cols bf16 values.
  virtual void matmul(float* y, const float* x, int n, const DeviceMatrix& w, uint16_t* act, Stream stream = nullptr) = 0;
  virtual const char* name() const = 0;
};

// The implementation of this build.
std::unique_ptr<Gemm> make_gemm();

// Emulated build only (gemm_host.cpp): whether the host GEMM rounds its activations to bf16 like
// cuBLAS (the default) or keeps them in fp32, so that tests can compare the rest of the device
// forward pass with the CPU to fp32 accuracy.
void set_host_gemm_rounding(bool round_activations);

}  // namespace slake::gpu
