// A slot: one sequence's context (KV cache, evictor, linear states) and the request it serves.
// A finished request leaves its tokens in the cache, so a request that continues them (the next
// turn of a conversation) prefills only what is new. The scheduler thread alone touches a slot.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "../common/backend.h"
#include "slake/context.h"
#include "slake/grammar/grammar.h"
#include "slake/session.h"
#include "slake/sampler.h"
#include "slake/tokenizer/tokenizer.h"
#include "prompt_cache.h"
#include "task.h"

namespace slake::server {

// The vocabulary as grammars see it (a trie of token bytes), made once, when a request first
// brings a grammar. The scheduler thread alone calls it.
class GrammarVocabSource {
 public:
  GrammarVocabSource(const Tokenizer& tokenizer, const std::unordered_set<int32_t>& eog) : tokenizer_(tokenizer), eog_(eog) {}
  std::shared_ptr<const GrammarVocab> get() {
    if (!vocab_) vocab_ = std::make_shared<GrammarVocab>(tokenizer_, eog_);
    return vocab_;
  }

 private:
  const Tokenizer& tokenizer_;
  const std::unordered_set<int32_t>& eog_;
  std::shared_ptr<const GrammarVocab> vocab_;
};

// Where a request's prompt prefix may come from besides the slot's own cache: another slot's
// cache (live) or a saved prompt (saved), holding `tokens`, of which `usable` serve the prompt.
struct PrefixSource {
  const Session* live = nullptr;
  const CachedPrompt* saved = nullptr;
  const std::vector<int32_t>* tokens = nullptr;
  int usable = 0;
};

class Slot {
 public:
  // `model`, `tokenizer`, `eog`, `grammar_vocab` and `pool` must outlive the slot; `backend` names
  // where its session runs (cpu or cuda, tools/common/backend.h).
  Slot(int id, const Model& model, const Tokenizer& tokenizer, const std::unordered_set<int32_t>& eog,
       GrammarVocabSource& grammar_vocab, int n_ctx, ThreadPool& pool, const KvPolicyParams& kv, const std::string& backend,
       PromptCache& prompt_cache);

  int id() const { return id_; }
  bool busy() const { return task_ != nullptr; }
  Task* task() const { return task_.get(); }
  size_t planned_bytes() const { return planned_; }
  size_t kv_bytes() const { return ctx_->kv_bytes_used(); }
  size_t kv_store_bytes() const { return ctx_->kv_store_bytes(); }
  uint64_t last_used() const { return last_used_; }
  int history_size() const { return static_cast<int>(history_.size()); }

  // Tokens of `r`'s prompt that this slot's cache serves under the same KV policy
  // (usable_prefix): its whole history when the prompt extends it; or, where nothing was evicted
  // or summarised (the full policy), the common prefix it is cut back to. The prompt's last
  // kReevaluate tokens are then prefilled as a fresh request's are (same chunks, same kernels), so
  // the reply is the one a fresh server gives.
  int reusable(const GenRequest& r) const;
  // What this slot's cache serves another slot's request: only a cache that can be cut back, cut
  // (cut_prefix). A history a prompt merely extends is a conversation's continuation for the slot
  // that holds it; under an evicting policy another request that happens to extend it (a prompt
  // still being prefilled beside it) must be prefilled whole, as a fresh request is.
  int shareable(const GenRequest& r) const;
  // Takes a task, keeping what the cache serves of it, or taking `from` when that serves more
  // (another slot's cache or a saved prompt). A history it does not keep whole is first saved to
  // the prompt cache.
  void start(std::shared_ptr<Task> task, size_t planned, uint64_t now, const PrefixSource& from = {});
  const std::vector<int32_t>& history() const { return history_; }
  // Whether this slot can take another's cache or a saved prompt (cpu sessions).
  bool can_load() const { return ctx_->cpu_context() != nullptr; }
  // Empties the cache of an idle slot (memory for other requests).
  void drop_cache();

  // The prompt is still to be evaluated, or (taken whole from a saved prompt) its first token sampled.
  bool prefilling() const { return busy() && (next_prefill_ < task_->req.prompt.size() || sample_first_); }
  // A follower of n > 1 choices waiting for its leader's prefill (GenRequest::prefill_leader).
  bool awaiting_leader() const { return busy() && awaiting_; }
  // A leader whose cache holds the prompt and nothing after it, and who kept the prompt's logits.
  bool prompt_shareable() const;
  // A follower takes the leader's cache and prompt logits and samples its first token; where the
  // backend cannot copy a cache, it goes on to prefill the prompt itself. Returns the prompt
  // tokens it took that its own cache did not hold.
  int share_prompt_of(const Slot& leader);
  void stop_awaiting() { awaiting_ = false; }
  bool decoding() const { return busy() && !prefilling() && pending_ >= 0; }
  // Evaluates the next `chunk` prompt tokens (the whole rest at once when the policy evicts at
  // prefill: it must see the whole prompt; the policy's own chunks under --prefill-chunk); the last
  // chunk samples the first token. Returns the number of tokens evaluated.
  int prefill(int chunk);
  // Decode: the token to evaluate next, then the logits decode_sessions gave it.
  Session& session() { return *ctx_; }
  int32_t pending() const { return pending_; }
  void decoded(const std::vector<float>& logits);

  // The task ended (finished, cancelled or failed): the slot is idle, its cache kept.
  bool finished() const { return busy() && done_; }
  void release();
  // Ends the task with an engine error; the cache is emptied, since it may be half-updated.
  void fail(const std::string& error);

  // State files (slake/state_file.h): what the cache holds, as bytes; a file's state taken in its
  // place (the slot rebuilt for the file's policy); the cache emptied. Throw slake::Error (a slot
  // that holds nothing, a device session, a damaged file or one of another model or shape).
  std::string save_file() const;
  int restore_file(const std::string& bytes);  // the tokens restored
  int erase();                                  // the tokens dropped

  // Counters for /metrics.
  int n_generated() const { return n_gen_; }

 private:
  std::unique_ptr<Session> make_session(const KvPolicyParams& kv);
  // Rebuilds the session for `kv` (nothing when it runs it already), the old cache dropped first.
  // A policy the backend lacks, or memory that is not there: the slot is left empty under its old
  // policy, and this throws.
  void use_policy(const KvPolicyParams& kv);
  void sample_and_emit();
  void finish(const std::string& reason);
  TokenLogprob logprob_of(int32_t token) const;

  int id_;
  const Model& model_;
  const Tokenizer& tokenizer_;
  const std::unordered_set<int32_t>& eog_;
  GrammarVocabSource& grammar_vocab_;
  PromptCache& prompt_cache_;
  int n_ctx_;
  ThreadPool& pool_;
  std::string backend_;
  std::unique_ptr<Session> ctx_;
  KvPolicyParams kv_;              // the policy ctx_ was built with
  std::vector<int32_t> history_;   // tokens the cache has seen, in order
  std::unique_ptr<GrammarMatcher> matcher_;  // the request's grammar, where it has one
  std::shared_ptr<Task> task_;
  size_t planned_ = 0;
  uint64_t last_used_ = 0;

  // The running request.
  size_t next_prefill_ = 0;  // prompt tokens in the cache
  bool chunked_ = false;     // the prompt is prefilled in the policy's chunks (eval_prompt_chunk)
  std::chrono::steady_clock::time_point t_start_, t_first_;  // the first prefill, the first token
  int n_cached_ = 0;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<StreamingDetokenizer> detok_;
  std::vector<float> logits_;
  std::vector<float> prompt_logits_;  // GenRequest::keeps_prompt: the prompt's, before sampling
  bool awaiting_ = false;
  bool sample_first_ = false;  // logits_ hold a saved prompt's: the next prefill samples from them
  int32_t pending_ = -1;  // sampled, not yet evaluated
  int n_gen_ = 0;
  std::string held_;  // text that may be the start of a stop string
  bool done_ = false;
};

}  // namespace slake::server
