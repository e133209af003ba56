#include "cuda/cuda_session.h"

#include <exception>
#include <string>
#include <vector>

#include "slake/error.h"

namespace slake::gpu {

namespace {
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
}  // namespace

CudaSession::CudaSession(const Model& m, const ContextParams& p)
    : ctx_(cuda_call([&] { return std::make_unique<DeviceContext>(m, p, shared_device_weights(m)); })) {}
CudaSession::~CudaSession() = default;
void CudaSession::eval(const std::vector<int32_t>& t, std::vector<float>* l, bool all) { cuda_call([&] { ctx_->eval(t, l, all); }); }
void CudaSession::eval_prompt_chunk(const std::vector<int32_t>& t, std::vector<float>* l) {
  cuda_call([&] { ctx_->eval_prompt_chunk(t, l); });
}
void CudaSession::reset() { cuda_call([&] { ctx_->reset(); }); }

bool CudaSession::decode_together(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens,
                                  std::vector<std::vector<float>>* logits) {
  std::vector<DeviceContext*> ctxs;
  for (Session* s : sessions) {
    auto* cs = dynamic_cast<CudaSession*>(s);
    if (!cs || cs->ctx_->batch_refusal(*ctx_)) return false;
    ctxs.push_back(cs->ctx_.get());
  }
  if (ctxs.empty() || ctxs[0] != ctx_.get()) return false;
  cuda_call([&] { DeviceContext::decode_batch(ctxs, tokens, logits); });
  return true;
}

}  // namespace slake::gpu
