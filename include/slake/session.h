// One sequence's inference session on a backend: the CPU Context (make_cpu_session) or the device
// context (cuda/cuda_session.h, in the device backend's library). Tools and the server hold
// sessions, so every backend serves every tool; the backend is chosen by name where the session is
// made (tools/common/backend.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slake/context.h"
#include "slake/model/model.h"

namespace slake {

class Session {
 public:
  virtual ~Session() = default;
  // As Context::eval.
  virtual void eval(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits = false) = 0;
  // As Context::eval_prompt_chunk: one chunk of a prompt prefilled in chunks, after the chunks
  // before it (cut by prefill_chunk_length), so that a server can step other slots between them.
  // The cuda backend takes later chunks only in a context made with a prefill chunk size.
  virtual void eval_prompt_chunk(const std::vector<int32_t>& tokens, std::vector<float>* logits) = 0;
  virtual int n_past() const = 0;
  virtual int n_ctx() const = 0;
  virtual const Model& model() const = 0;
  virtual int64_t tokens_held() const = 0;
  virtual void reset() = 0;
  virtual size_t kv_bytes_used() const = 0;
  virtual size_t kv_peak_bytes() const = 0;
  // The recall stores' part of kv_bytes_used (kv_recall.h); 0 where nothing is recalled.
  virtual size_t kv_store_bytes() const { return 0; }
  virtual size_t peak_device_bytes() const = 0;  // the planned arena; 0 on cpu
  virtual std::string describe() const = 0;       // one line for stderr
  // The prefix tokens each layer keeps after the last prompt's eviction (empty: none evicted).
  virtual std::vector<int64_t> layer_budgets() const = 0;
  // The CPU context behind a cpu session (decode_batch, prefill_shared); null on other backends.
  virtual Context* cpu_context() { return nullptr; }
  virtual const Context* cpu_context() const { return nullptr; }
  // Takes over what `other` holds (Context::copy_state_from); false where this backend cannot
  // (the caller evaluates the tokens itself).
  virtual bool copy_state_from(const Session& other) {
    (void)other;
    return false;
  }
  // Context::save_state / restore_state / truncate where the backend has them; null or false
  // (nothing changed) where it does not.
  virtual std::shared_ptr<const ContextState> save_state() const { return nullptr; }
  virtual bool restore_state(const ContextState& state) {
    (void)state;
    return false;
  }
  virtual bool truncate(int n) {
    (void)n;
    return false;
  }
  virtual bool can_truncate() const { return false; }
  // One decode step of `sessions` (this one first among them) together, as decode_sessions
  // describes; false, with nothing evaluated, where this backend cannot step these sessions
  // together (decode_sessions then steps them one after another).
  virtual bool decode_together(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens,
                               std::vector<std::vector<float>>* logits) {
    (void)sessions, (void)tokens, (void)logits;
    return false;
  }
};

class CpuSession final : public Session {
 public:
  CpuSession(const Model& m, const ContextParams& p) : ctx_(m, p) {}
  void eval(const std::vector<int32_t>& t, std::vector<float>* l, bool all) override { ctx_.eval(t, l, all); }
  void eval_prompt_chunk(const std::vector<int32_t>& t, std::vector<float>* l) override { ctx_.eval_prompt_chunk(t, l); }
  int n_past() const override { return ctx_.n_past(); }
  int n_ctx() const override { return ctx_.n_ctx(); }
  const Model& model() const override { return ctx_.model(); }
  int64_t tokens_held() const override { return ctx_.kv_cache().tokens_held(); }
  void reset() override { ctx_.reset(); }
  size_t kv_bytes_used() const override { return ctx_.kv_cache().bytes_used(); }
  size_t kv_peak_bytes() const override { return ctx_.kv_cache().peak_bytes_used(); }
  size_t kv_store_bytes() const override { return ctx_.kv_cache().store_bytes_used(); }
  size_t peak_device_bytes() const override { return 0; }
  std::string describe() const override { return "backend cpu"; }
  std::vector<int64_t> layer_budgets() const override { return ctx_.evictor().budgets(); }
  Context* cpu_context() override { return &ctx_; }
  const Context* cpu_context() const override { return &ctx_; }
  bool copy_state_from(const Session& other) override {
    const Context* o = other.cpu_context();
    if (!o) return false;
    ctx_.copy_state_from(*o);
    return true;
  }
  std::shared_ptr<const ContextState> save_state() const override { return ctx_.save_state(); }
  bool restore_state(const ContextState& state) override {
    ctx_.restore_state(state);
    return true;
  }
  bool truncate(int n) override { return ctx_.truncate(n); }
  bool can_truncate() const override { return ctx_.can_truncate(); }

 private:
  Context ctx_;
};

// One decode step of several sessions, token i into session i, logits[i] its logits: cpu sessions
// sharing one thread pool step together through decode_batch, cuda sessions of one model together
// through gpu::DeviceContext::decode_batch (the weights read once for all); other sessions are
// stepped one after another. Each result is the session's own eval({token})'s (on a GPU up to the
// order in which a GEMM of several rows sums).
void decode_sessions(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens,
                     std::vector<std::vector<float>>* logits);

}  // namespace slake
