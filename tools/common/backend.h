// The --backend flag shared by slake-cli, slake-perplexity and slake-bench, and one session type
// over both backends: slake::Context (cpu) or slake::gpu::DeviceContext (cuda, when the tools were
// built with the CUDA backend: SLAKE_HAVE_CUDA_BACKEND). A build without CUDA refuses
// --backend cuda with an error saying so.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/model/model.h"
#if SLAKE_HAVE_CUDA_BACKEND
#include "backend/device_context.h"
#endif

namespace slake::tools {

inline bool cuda_backend_built() { return SLAKE_HAVE_CUDA_BACKEND + 0 != 0; }

inline CLI::Option* add_backend_flag(CLI::App& app, std::string& backend) {
  return app.add_option("--backend", backend, "where the forward pass runs: cpu, or cuda (one GPU, bf16 weights)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

// Throws slake::Error for a backend this build cannot run.
inline void check_backend(const std::string& backend) {
  if (backend == "cuda" && !cuda_backend_built())
    fail("--backend cuda: this build has no CUDA backend (built without CUDA: nvcc was not found or SLAKE_CUDA=OFF)");
  if (backend != "cpu" && backend != "cuda") fail("--backend: unknown backend " + backend);
}

class Session {
 public:
  virtual ~Session() = default;
  virtual void eval(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits = false) = 0;
  virtual int n_past() const = 0;
  virtual int n_ctx() const = 0;
  virtual const Model& model() const = 0;
  virtual int64_t tokens_held() const = 0;
  virtual void reset() = 0;
  virtual size_t kv_bytes_used() const = 0;
  virtual size_t kv_peak_bytes() const = 0;
  virtual size_t peak_device_bytes() const = 0;  // the planned arena; 0 on cpu
  virtual std::string describe() const = 0;       // one line for stderr
  // The prefix tokens each layer keeps after the last prompt's eviction (empty: none evicted).
  virtual std::vector<int64_t> layer_budgets() const = 0;
};

class CpuSession final : public Session {
 public:
  CpuSession(const Model& m, const ContextParams& p) : ctx_(m, p) {}
  void eval(const std::vector<int32_t>& t, std::vector<float>* l, bool all) override { ctx_.eval(t, l, all); }
  int n_past() const override { return ctx_.n_past(); }
  int n_ctx() const override { return ctx_.n_ctx(); }
  const Model& model() const override { return ctx_.model(); }
  int64_t tokens_held() const override { return ctx_.kv_cache().tokens_held(); }
  void reset() override { ctx_.reset(); }
  size_t kv_bytes_used() const override { return ctx_.kv_cache().bytes_used(); }
  size_t kv_peak_bytes() const override { return ctx_.kv_cache().peak_bytes_used(); }
  size_t peak_device_bytes() const override { return 0; }
  std::string describe() const override { return "backend cpu"; }
  std::vector<int64_t> layer_budgets() const override { return ctx_.evictor().budgets(); }
  Context& context() { return ctx_; }

 private:
  Context ctx_;
};

#if SLAKE_HAVE_CUDA_BACKEND
// CUDA runtime and cuBLAS failures (gpu::Error) become slake::Error, which the tools report.
template <typename F>
auto cuda_call(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const slake::Error&) {
    throw;
  } catch (const std::exception& ex) {
    fail(std::string("cuda backend: ") + ex.what());
  }
}

class CudaSession final : public Session {
 public:
  CudaSession(const Model& m, const ContextParams& p) : ctx_(cuda_call([&] { return std::make_unique<gpu::DeviceContext>(m, p); })) {}
  void eval(const std::vector<int32_t>& t, std::vector<float>* l, bool all) override {
    cuda_call([&] { ctx_->eval(t, l, all); });
  }
  int n_past() const override { return ctx_->n_past(); }
  int n_ctx() const override { return ctx_->n_ctx(); }
  const Model& model() const override { return ctx_->model(); }
  int64_t tokens_held() const override { return ctx_->tokens_held(); }
  void reset() override { cuda_call([&] { ctx_->reset(); }); }
  size_t kv_bytes_used() const override { return ctx_->kv_bytes_used(); }
  size_t kv_peak_bytes() const override { return ctx_->kv_peak_bytes(); }
  size_t peak_device_bytes() const override { return ctx_->peak_device_bytes(); }
  std::string describe() const override { return "backend cuda, device memory " + ctx_->plan().summary(); }
  std::vector<int64_t> layer_budgets() const override { return ctx_->budgets(); }

 private:
  std::unique_ptr<gpu::DeviceContext> ctx_;
};
#endif

inline std::unique_ptr<Session> make_session(const std::string& backend, const Model& m, const ContextParams& p) {
  check_backend(backend);
#if SLAKE_HAVE_CUDA_BACKEND
  if (backend == "cuda") return std::make_unique<CudaSession>(m, p);
#endif
  return std::make_unique<CpuSession>(m, p);
}

}  // namespace slake::tools
