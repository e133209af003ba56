// The sessions of several KV settings of one model (slake-perplexity --kv-sweep, slake-cli --batch
// with or without --kv-sweep): one session per setting, each setting with the model's defaults
// resolved. prefill() and step() run them all: on the cpu backend with more than one setting they
// share one thread pool, so a prompt takes one forward pass for all settings (prefill_shared) and
// their decode steps one batch (decode_batch); on cuda each session takes the prompt on its own
// and their decode steps go as one batch (decode_sessions, which steps cuda sessions of one model
// together).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "slake/batch_decode.h"
#include "slake/context.h"
#include "slake/error.h"
#include "slake/session.h"
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
  // Every session reset and given `prompt`; (*logits)[i] is session i's logits of its last token.
  void prefill(const std::vector<int32_t>& prompt, std::vector<std::vector<float>>* logits) {
    logits->resize(sessions_.size());
    for (auto& s : sessions_) s->reset();
    if (together()) {
      prefill_shared(contexts_, prompt, &(*logits)[0]);
      for (size_t i = 1; i < sessions_.size(); ++i) (*logits)[i] = (*logits)[0];
      return;
    }
    for (size_t i = 0; i < sessions_.size(); ++i) sessions_[i]->eval(prompt, &(*logits)[i]);
  }
  // One decode step of sessions who[j] with tokens[j], together where the backend can; (*logits)[j]
  // is who[j]'s. A lone session evaluates on its own.
  void step(const std::vector<size_t>& who, const std::vector<int32_t>& tokens, std::vector<std::vector<float>>* logits) {
    if (who.size() != tokens.size()) fail("internal: a sweep step of " + std::to_string(who.size()) + " sessions and " +
                                          std::to_string(tokens.size()) + " tokens");
    if (who.size() == 1) {
      logits->resize(1);
      return sessions_[who[0]]->eval({tokens[0]}, &(*logits)[0]);
    }
    std::vector<Session*> step;
    for (const size_t i : who) step.push_back(sessions_.at(i).get());
    decode_sessions(step, tokens, logits);
  }
  ThreadPool* pool() const { return pool_.get(); }  // the cpu sessions' shared pool, or null; others may share it

 private:
  bool together() const { return !contexts_.empty(); }  // cpu sessions that share pool_ (prefill_shared)
  std::unique_ptr<ThreadPool> pool_;  // first, so the sessions using it go before it
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<KvPolicyParams> kv_;
  std::vector<Context*> contexts_;
};

}  // namespace slake::tools
