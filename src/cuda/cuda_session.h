// A Session (slake/session.h) on the device context. Every session of a model shares one copy of
// its weights on the device (shared_device_weights), and sessions of one layout (context size,
// batch) their activations (shared_device_activations): a server's slots, a sweep's settings;
// they run one at a time. CUDA
// runtime and cuBLAS failures (gpu::Error) become slake::Error, which the tools and the server
// report.
#pragma once
#include <memory>

#include "cuda/device_context.h"
#include "slake/session.h"

namespace slake::gpu {

class CudaSession final : public Session {
 public:
  CudaSession(const Model& m, const ContextParams& p);
  ~CudaSession() override;
  void eval(const std::vector<int32_t>& t, std::vector<float>* l, bool all) override;
  void eval_prompt_chunk(const std::vector<int32_t>& t, std::vector<float>* l) override;
  int n_past() const override { return ctx_->n_past(); }
  int n_ctx() const override { return ctx_->n_ctx(); }
  const Model& model() const override { return ctx_->model(); }
  int64_t tokens_held() const override { return ctx_->tokens_held(); }
  void reset() override;
  size_t kv_bytes_used() const override { return ctx_->kv_bytes_used(); }
  size_t kv_store_bytes() const override { return ctx_->kv_store_bytes(); }
  size_t kv_peak_bytes() const override { return ctx_->kv_peak_bytes(); }
  size_t peak_device_bytes() const override { return ctx_->peak_device_bytes(); }
  std::string describe() const override {
    const DevicePlan& p = ctx_->plan();
    return "backend cuda, device memory " + p.summary() + " + shared weights " +
           std::to_string((ctx_->peak_device_bytes() - p.total_bytes() - p.activation_bytes()) >> 20) + " MiB + shared activations " +
           std::to_string(p.activation_bytes() >> 20) + " MiB";
  }
  std::vector<int64_t> layer_budgets() const override { return ctx_->budgets(); }
  // Cuda sessions of one model, each holding a prompt: DeviceContext::decode_batch.
  bool decode_together(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens,
                       std::vector<std::vector<float>>* logits) override;

 private:
  std::unique_ptr<DeviceContext> ctx_;
};

}  // namespace slake::gpu
