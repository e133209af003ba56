// A generation request as the scheduler runs it, and the channel its tokens come back through:
// the HTTP handler that made the task waits on it (and streams from it), the scheduler thread
// pushes to it. Cancelling (the client went away) is seen by the scheduler before its next step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "slake/kv/kv_policy.h"
#include "slake/grammar/grammar.h"
#include "slake/sampler.h"

namespace slake::server {

class Task;

struct GenRequest {
  std::vector<int32_t> prompt;  // what the context must hold before the first sampled token
  int max_tokens = -1;          // -1: until an end of generation or a full context
  SamplerParams sampling;
  std::vector<std::string> stop;  // generation ends before the first of these texts
  int top_logprobs = -1;          // -1: no log probabilities; else this many alternatives per token
  bool ignore_eos = false;        // llama-server's extension: end-of-generation tokens are never sampled
  KvPolicyParams kv;              // the slot's policy for this request (resolved and validated)
  std::shared_ptr<const Grammar> grammar;  // the reply must match it (grammar, response_format); null: free
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits; -100 or less bans the token
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};  // DRY's, as llama.cpp's defaults
  // n > 1 choices of one request share the prompt's prefill: the first choice's task keeps the
  // prompt's logits (keeps_prompt), and each other's names it (prefill_leader). A slot serving
  // such a follower copies the leader's cache once the leader has prefilled the prompt, if it
  // is still as the prompt left it; else it prefills the prompt itself (the same result).
  bool keeps_prompt = false;
  std::weak_ptr<const Task> prefill_leader;
};

// One generated token's log probability, and the most probable alternatives at its place.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// What one step adds to a reply: text that is final (never taken back by a stop string) and the
// tokens sampled (their log probabilities, when asked for).
struct Piece {
  std::string text;
  std::vector<int32_t> ids;          // the tokens sampled
  std::vector<TokenLogprob> tokens;  // their log probabilities, when asked for
};

class Task {
 public:
  explicit Task(GenRequest r) : req(std::move(r)) {}
  const GenRequest req;

  // Scheduler side.
  void push(Piece p) {
    std::lock_guard<std::mutex> l(mu_);
    pieces_.push_back(std::move(p));
    cv_.notify_all();
  }
  // finish_reason "stop" or "length"; or a non-empty error (the request failed in the engine).
  void finish(const std::string& finish_reason, int n_prompt, int n_cached, int n_gen, const std::string& error = "") {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
    finish_reason_ = finish_reason;
    error_ = error;
    n_prompt_ = n_prompt;
    n_cached_ = n_cached;
    n_gen_ = n_gen;
    cv_.notify_all();
  }
  // Milliseconds the prompt took (from the slot's first prefill to the first token) and the
  // generation after it, before finish (llama-server's timings).
  void set_timings(double prompt_ms, double gen_ms) {
    std::lock_guard<std::mutex> l(mu_);
    prompt_ms_ = prompt_ms;
    gen_ms_ = gen_ms;
  }
  // The stop string that ended the reply, before finish("stop").
  void set_stop_word(const std::string& w) {
    std::lock_guard<std::mutex> l(mu_);
    stop_word_ = w;
  }
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Handler side: moves the pieces that arrived into `out`; waits up to `wait` for one when none
  // has. Returns whether the task is done (everything it will produce is then in `out`).
  bool take(std::vector<Piece>& out, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> l(mu_);
    if (pieces_.empty() && !done_) cv_.wait_for(l, wait, [&] { return !pieces_.empty() || done_; });
    while (!pieces_.empty()) {
      out.push_back(std::move(pieces_.front()));
      pieces_.pop_front();
    }
    return done_;
  }
  // After take() returned true.
  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& error() const { return error_; }
  const std::string& stop_word() const { return stop_word_; }  // "" : not ended by a stop string
  double prompt_ms() const { return prompt_ms_; }
  double gen_ms() const { return gen_ms_; }
  int n_prompt() const { return n_prompt_; }
  int n_cached() const { return n_cached_; }  // prompt tokens found in the slot's cache
  int n_gen() const { return n_gen_; }

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> pieces_;
  bool done_ = false;
  std::string finish_reason_, error_, stop_word_;
  int n_prompt_ = 0, n_cached_ = 0, n_gen_ = 0;
  double prompt_ms_ = 0, gen_ms_ = 0;
};

}  // namespace slake::server
