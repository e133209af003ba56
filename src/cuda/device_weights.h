// A model's weights on the device: matrices and the embedding table in bf16 (any file type is
// dequantised, then rounded), 1-D weights (norms, biases) in fp32. One list of them
// (for_each_device_weight) serves a context's plan and both ways of holding them: inside one
// context's arena, or in a DeviceWeights of their own that every context of the model shares
// (shared_device_weights), as the server's slots and a sweep's sessions do.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/gemm.h"
#include "slake/model/model.h"

namespace slake::gpu {

struct LayerWeightsOnDevice {
  DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qkv_bias
  const float *q_norm = nullptr, *k_norm = nullptr;         // qk_norm
  const float *attn_post_norm = nullptr, *ffn_post_norm = nullptr;  // post_norms
  DeviceMatrix router;                                 // with experts (w_gate, w_up, w_down empty)
  std::vector<DeviceMatrix> exp_gate, exp_up, exp_down;
  DeviceMatrix shexp_gate, shexp_up, shexp_down, shexp_router;  // a shared expert (qwen2moe)
};

struct WeightsOnDevice {
  DeviceMatrix tok_embd, output;  // output is tok_embd when tied
  const float* output_norm = nullptr;
  std::vector<LayerWeightsOnDevice> layers;
};

// Every weight tensor the device holds, in upload order: its name in a plan ("tok_embd",
// "layer3.wq", ...), its view, whether it is a matrix (bf16) or a vector (fp32), and its bytes.
void for_each_device_weight(const Model& m,
                            const std::function<void(const std::string& name, const TensorView& t, bool matrix, size_t bytes)>& f);

// Uploads every weight to the device memory where(name) gives, returning the views.
WeightsOnDevice upload_weights(const Model& m, const std::function<void*(const std::string& name)>& where);

class DeviceWeights {
 public:
  // Allocates and uploads; refuses (slake::Error) before allocating when they do not fit.
  explicit DeviceWeights(const Model& m);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  const WeightsOnDevice& views() const { return views_; }
  size_t bytes() const { return bytes_; }

 private:
  void* mem_ = nullptr;
  size_t bytes_ = 0;
  WeightsOnDevice views_;
};

// The weights of `m` on the device, uploaded by the first caller and shared while any context
// holds them (thread-safe).
std::shared_ptr<const DeviceWeights> shared_device_weights(const Model& m);

}  // namespace slake::gpu
