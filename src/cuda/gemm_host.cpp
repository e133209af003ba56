// The emulated build's GEMM: device pointers are host pointers, so a plain loop over bf16 values.
#include "gemm.h"

#include <cstring>

namespace slake::gpu {

namespace {
bool g_round = true;

inline float bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

class HostGemm final : public Gemm {
 public:
  void matmul(float* y, const float* x, int n, const DeviceMatrix& w, uint16_t* act, Stream stream) override {
    to_bf16(act, x, static_cast<int64_t>(n) * w.cols, stream);
    for (int t = 0; t < n; ++t) {
      const uint16_t* a = act + static_cast<int64_t>(t) * w.cols;
      for (int r = 0; r < w.rows; ++r) {
        const uint16_t* wr = w.data + static_cast<int64_t>(r) * w.cols;
        float acc = 0.0f;
        for (int c = 0; c < w.cols; ++c) acc += (g_round ? bf16(a[c]) : x[static_cast<int64_t>(t) * w.cols + c]) * bf16(wr[c]);
        y[static_cast<int64_t>(t) * w.rows + r] = acc;
      }
    }
  }
  const char* name() const override { return "host (emulated)"; }
};
}  // namespace

void set_host_gemm_rounding(bool round_activations) { g_round = round_activations; }

std::unique_ptr<Gemm> make_gemm() { return std::make_unique<HostGemm>(); }

}  // namespace slake::gpu
