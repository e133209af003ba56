// The sessions of several KV settings of one model (slake-perplexity --kv-sweep, slake-cli --batch
// with or without --kv-sweep): one session per setting, each setting with the model's defaults
// resolved. On the cpu backend with more than one setting they share one thread pool and
// together() is true: contexts() then go to prefill_shared and decode_batch, one forward pass of a
// prompt for all settings and their decode steps as one batch. Otherwise (one setting, or cuda)
// each session runs on its own.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "slake/context.h"
#include "slake/kv/kv_policy.h"
#include "slake/model/model.h"
#include "slake/cpu/thread_pool.h"

namespace slake::tools {

class SweepSessions {
 public:
  // `cp` gives n_ctx and n_threads; its kv is replaced by each setting.
  SweepSessions(const std::string& backend, const Model& m, ContextParams cp, const std::vector<KvPolicyParams>& settings) {
    if (settings.empty()) fail("no KV setting to run");
    if (backend == "cpu" && settings.size() > 1) {
      pool_ = std::make_unique<ThreadPool>(cp.n_threads > 0 ? cp.n_threads : default_thread_count());
      cp.pool = pool_.get();
    }
    for (const KvPolicyParams& kv : settings) {
      cp.kv = resolve_kv_policy(kv, false, &m.cfg);
      kv_.push_back(cp.kv);
      sessions_.push_back(make_session(backend, m, cp));
      if (pool_) contexts_.push_back(sessions_.back()->cpu_context());
    }
  }

  size_t size() const { return sessions_.size(); }
  Session& session(size_t i) { return *sessions_[i]; }
  const KvPolicyParams& kv(size_t i) const { return kv_[i]; }  // resolved
  bool together() const { return !contexts_.empty(); }
  const std::vector<Context*>& contexts() const { return contexts_; }  // empty unless together()
  ThreadPool* pool() const { return pool_.get(); }  // null unless together(); other sessions may share it

 private:
  std::unique_ptr<ThreadPool> pool_;  // first, so the sessions using it go before it
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<KvPolicyParams> kv_;
  std::vector<Context*> contexts_;
};

}  // namespace slake::tools
