// The scheduler: one thread that owns the slots and runs the model. Each step it
//   1. drops the requests whose clients went away (their slots are free for this step),
//   2. admits waiting requests, first come first served, into the idle slot whose cache serves the
//      most of the prompt, else the least recently used one, taking a longer prefix from another
//      slot's cache or the prompt cache (prompt_cache.h) where one holds it, when their planned KV memory (kv_plan.h) fits under
//      --kv-memory beside what the busy slots planned (idle slots' caches are dropped, least
//      recently used first, to make room),
//   3. decodes one token of every generating slot in one batched step (decode_batch: the weights
//      are read once for all of them),
//   4. prefills the next chunk (n_batch tokens) of waiting prompts, so a long prompt delays the
//      running replies by one chunk per step, not by its whole length,
//   5. gives the followers of a request's n > 1 choices a copy of their leader's cache once the
//      leader has prefilled the prompt (GenRequest::prefill_leader).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "slake/model/model.h"
#include "slake/cpu/thread_pool.h"
#include "slake/tokenizer/tokenizer.h"
#include "slot.h"
#include "task.h"

namespace slake::server {

struct SchedulerConfig {
  int n_slots = 1;
  int n_ctx = 0;  // per slot, resolved (not 0)
  int n_batch = 256;
  int queue_max = 64;
  int n_threads = 0;
  size_t kv_memory = 0;  // bytes; 0: no limit
  size_t cache_ram = 0;  // the prompt cache's bytes (prompt_cache.h); 0: off
  KvPolicyParams kv;     // the slots' initial policy
  std::string backend = "cpu";  // where the slots' sessions run (tools/common/backend.h)
};

// Counters and gauges for /metrics, read from any thread.
struct SchedulerStats {
  uint64_t requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  uint64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0;
  uint64_t decode_steps = 0, decode_rows = 0, prefill_chunks = 0;
  uint64_t prefix_hits = 0;  // requests that took their prefix from another slot or the prompt cache
  size_t prompt_cache_bytes = 0, prompt_cache_entries = 0;
  double decode_seconds = 0, prefill_seconds = 0;
  int slots_busy = 0, queue_length = 0;
  std::vector<size_t> kv_bytes;     // per slot, held now
  std::vector<size_t> kv_store_bytes;  // per slot, the recall stores' part of kv_bytes
  std::vector<size_t> kv_planned;   // per slot, planned for its request (0 when idle)
  std::vector<int> history;         // per slot, tokens its cache has seen (its conversation so far)
  std::vector<char> busy;           // per slot, serving a request
};

class Scheduler {
 public:
  // `model` and `tokenizer` must outlive the scheduler. Starts the thread.
  Scheduler(const Model& model, const Tokenizer& tokenizer, const SchedulerConfig& cfg);
  ~Scheduler();

  enum class Admit { Queued, QueueFull, TooLarge, TooManyChoices };
  // Queues a task. TooLarge: its planned KV memory exceeds --kv-memory even alone (`why` says so).
  Admit submit(std::shared_ptr<Task> task, std::string* why);
  // Queues several tasks together, one after another (a request's n > 1 choices), or none.
  Admit submit(std::vector<std::shared_ptr<Task>> tasks, std::string* why);
  // Stops the thread; every task not finished ends with an error. Thread-safe; idempotent.
  void stop();

  // Runs `job` on the scheduler thread with slot `id`, before the next admission, and waits for
  // it (llama-server's slot save, restore and erase). Throws slake::Error for a slot that does not
  // exist or is serving a request, and what the job throws.
  void with_idle_slot(int id, std::function<void(Slot&)> job);

  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return cfg_; }

 private:
  struct SlotJob {
    int id = 0;
    std::function<void(Slot&)> run;
    std::promise<void> done;
  };
  void loop();
  void run_jobs();
  void refresh_slot_stats();  // under mu_
  void admit();                  // under mu_
  void step();                   // outside mu_
  size_t plan(const GenRequest& r) const;
  // What serves the most of r's prompt beyond what slot `to` holds itself (`own` tokens): another
  // slot's cache (not one mid-prefill) or a saved prompt.
  PrefixSource best_source(const GenRequest& r, const Slot* to, int own) const;
  // Under --kv-memory: drops saved prompts, least recently used first, while they and the slots
  // (busy ones at their plans) hold more than it.
  void trim_prompt_cache();

  const Model& model_;
  const Tokenizer& tokenizer_;
  SchedulerConfig cfg_;
  std::unordered_set<int32_t> eog_;
  GrammarVocabSource grammar_vocab_;  // the vocabulary's trie, made for the first grammar
  PromptCache prompt_cache_;
  ThreadPool pool_;
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t clock_ = 0;  // for least recently used

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::deque<std::shared_ptr<SlotJob>> jobs_;
  bool stop_ = false;
  int idle_slots_;  // under mu_
  bool memory_blocked_ = false;  // under mu_: the queue's head waits for KV memory, not for a slot
  SchedulerStats stats_;  // under mu_
  size_t prefill_rr_ = 0;
  std::thread thread_;
  std::mutex join_mu_;  // stop()'s join of thread_
};

}  // namespace slake::server
