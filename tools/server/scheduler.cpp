#include "scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "../common/end_of_generation.h"
#include "kv_plan.h"
#include "slake/batch_decode.h"
#include "slake/error.h"

namespace slake::server {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / 1048576.0);
  return buf;
}

}  // namespace

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer, const SchedulerConfig& cfg)
    : model_(model),
      tokenizer_(tokenizer),
      cfg_(cfg),
      eog_(tools::end_of_generation_tokens(tokenizer.vocab())),
      grammar_vocab_(tokenizer, eog_),
      prompt_cache_(cfg.cache_ram),
      pool_(cfg.n_threads > 0 ? cfg.n_threads : default_thread_count()),
      idle_slots_(cfg.n_slots) {
  for (int i = 0; i < cfg_.n_slots; ++i)
    slots_.push_back(std::make_unique<Slot>(i, model, tokenizer, eog_, grammar_vocab_, cfg_.n_ctx, pool_, cfg_.kv, cfg_.backend,
                                            prompt_cache_));
  stats_.kv_bytes.assign(slots_.size(), 0);
  stats_.kv_store_bytes.assign(slots_.size(), 0);
  stats_.history.assign(slots_.size(), 0);
  stats_.busy.assign(slots_.size(), 0);
  stats_.kv_planned.assign(slots_.size(), 0);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  // Callable from several threads at once (a router's unload and its shutdown): one joins.
  std::lock_guard<std::mutex> j(join_mu_);
  if (thread_.joinable()) thread_.join();
}

// The prompt includes a reused history: the cache ends up as large either way.
size_t Scheduler::plan(const GenRequest& r) const {
  const long long reply = r.max_tokens < 0 ? cfg_.n_ctx : r.max_tokens;
  return planned_kv_bytes(model_.cfg, r.kv, cfg_.n_ctx, static_cast<long long>(r.prompt.size()) + reply,
                          static_cast<long long>(r.prompt.size()));
}

Scheduler::Admit Scheduler::submit(std::shared_ptr<Task> task, std::string* why) {
  return submit(std::vector<std::shared_ptr<Task>>{std::move(task)}, why);
}

Scheduler::Admit Scheduler::submit(std::vector<std::shared_ptr<Task>> tasks, std::string* why) {
  size_t need = 0;
  for (const auto& t : tasks) need = std::max(need, plan(t->req));
  if (cfg_.kv_memory > 0 && need > cfg_.kv_memory) {
    if (why)
      *why = "the request plans " + mib(need) + " MiB of KV cache (prompt " + std::to_string(tasks[0]->req.prompt.size()) +
             " tokens + max_tokens), more than --kv-memory " + mib(cfg_.kv_memory) +
             " MiB; lower max_tokens or use a KV budget";
    return Admit::TooLarge;
  }
  if (tasks.size() > static_cast<size_t>(cfg_.queue_max + cfg_.n_slots)) {
    if (why)
      *why = std::to_string(tasks.size()) + " choices cannot all wait: " + std::to_string(cfg_.n_slots) + " slots and --queue " +
             std::to_string(cfg_.queue_max) + "; ask for fewer";
    return Admit::TooManyChoices;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) {
    if (why) *why = "the server is shutting down";
    return Admit::QueueFull;
  }
  // Requests that an idle slot will take at once do not count against the queue; while the head of
  // the queue waits for KV memory, no idle slot takes anything.
  const int takers = memory_blocked_ ? 0 : idle_slots_;
  if (queue_.size() + tasks.size() > static_cast<size_t>(cfg_.queue_max + takers)) {
    if (why)
      *why = "the server is busy: " + std::to_string(cfg_.n_slots - idle_slots_) + " slots busy and " +
             std::to_string(queue_.size()) + " requests waiting (--queue " + std::to_string(cfg_.queue_max) + "); retry later";
    return Admit::QueueFull;
  }
  for (auto& t : tasks) queue_.push_back(std::move(t));
  stats_.queue_length = static_cast<int>(queue_.size());
  cv_.notify_all();
  return Admit::Queued;
}

PrefixSource Scheduler::best_source(const GenRequest& r, const Slot* to, int own) const {
  PrefixSource best;
  best.usable = own;
  if (!to->can_load()) return best;
  for (const auto& s : slots_) {
    if (s.get() == to || s->prefilling() || s->history().empty()) continue;
    const int u = s->shareable(r);
    if (u > best.usable) best = {&const_cast<Slot&>(*s).session(), nullptr, &s->history(), u};
  }
  int u = 0;
  if (const CachedPrompt* e = prompt_cache_.find(r.prompt, r.kv, &u); e && u > best.usable) best = {nullptr, e, &e->tokens, u};
  return best;
}

void Scheduler::trim_prompt_cache() {
  if (cfg_.kv_memory == 0) return;
  size_t used = prompt_cache_.bytes();
  for (auto& s : slots_) used += s->busy() ? std::max(s->planned_bytes(), s->kv_bytes()) : s->kv_bytes();
  while (used > cfg_.kv_memory && prompt_cache_.bytes() > 0) {
    const size_t before = prompt_cache_.bytes();
    if (!prompt_cache_.drop_oldest()) break;
    used -= before - prompt_cache_.bytes();
  }
}

void Scheduler::admit() {
  memory_blocked_ = false;
  while (!queue_.empty()) {
    const std::shared_ptr<Task>& task = queue_.front();
    if (task->cancelled()) {
      ++stats_.requests_cancelled;
      queue_.pop_front();
      continue;
    }
    // A slot whose cache the prompt extends (the longest), else the least recently used idle one.
    Slot* best = nullptr;
    int best_reuse = 0;
    for (auto& s : slots_) {
      if (s->busy()) continue;
      const int reuse = s->reusable(task->req);
      if (!best || reuse > best_reuse || (reuse == best_reuse && s->last_used() < best->last_used())) {
        best = s.get();
        best_reuse = reuse;
      }
    }
    if (!best) return;  // every slot is busy
    const size_t need = plan(task->req);
    if (cfg_.kv_memory > 0) {
      size_t busy = 0;
      for (auto& s : slots_)
        if (s->busy()) busy += s->planned_bytes();
      if (busy + need > cfg_.kv_memory) {  // nothing idle can make room: wait for busy slots to finish
        memory_blocked_ = true;
        return;
      }
      auto in_use = [&] {
        size_t used = busy + prompt_cache_.bytes();
        for (auto& s : slots_)
          if (!s->busy() && s.get() != best) used += s->kv_bytes();
        return used;
      };
      // Saved prompts (but the one that would serve this request), then idle caches, give way to
      // a waiting request, least recently used first.
      const PrefixSource wanted = best_source(task->req, best, best_reuse);
      while (in_use() + need > cfg_.kv_memory && prompt_cache_.drop_oldest(wanted.saved)) {
      }
      while (in_use() + need > cfg_.kv_memory) {
        Slot* victim = nullptr;
        for (auto& s : slots_)
          if (!s->busy() && s.get() != best && s->kv_bytes() > 0 && (!victim || s->last_used() < victim->last_used()))
            victim = s.get();
        if (!victim) break;
        victim->drop_cache();
      }
      if (in_use() + need > cfg_.kv_memory) prompt_cache_.drop_oldest();  // the wanted one, last
      if (in_use() + need > cfg_.kv_memory) {  // waits for busy slots to finish
        memory_blocked_ = true;
        return;
      }
    }
    const PrefixSource from = best_source(task->req, best, best_reuse);
    if (from.usable > best_reuse) {
      if (from.saved) prompt_cache_.touch(from.saved, clock_ + 1);
      best_reuse = from.usable;
      ++stats_.prefix_hits;
    }
    try {
      best->start(task, need, ++clock_, from);
    } catch (const std::exception& e) {  // a policy's context that cannot be built
      task->finish("", static_cast<int>(task->req.prompt.size()), 0, 0, e.what());
      ++stats_.requests_failed;
      queue_.pop_front();
      continue;
    }
    trim_prompt_cache();  // the slot may have saved what it held
    --idle_slots_;
    stats_.prompt_tokens += task->req.prompt.size();
    stats_.cached_prompt_tokens += static_cast<uint64_t>(best_reuse);
    queue_.pop_front();
  }
}

void Scheduler::with_idle_slot(int id, std::function<void(Slot&)> job) {
  auto j = std::make_shared<SlotJob>();
  j->id = id;
  j->run = std::move(job);
  std::future<void> done = j->done.get_future();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) fail("the server is shutting down");
    jobs_.push_back(j);
    cv_.notify_all();
  }
  done.get();
}

void Scheduler::run_jobs() {
  std::deque<std::shared_ptr<SlotJob>> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs.swap(jobs_);
  }
  for (auto& j : jobs) {
    std::exception_ptr error;
    try {
      if (j->id < 0 || j->id >= static_cast<int>(slots_.size())) fail("no slot " + std::to_string(j->id));
      Slot& s = *slots_[static_cast<size_t>(j->id)];
      if (s.busy()) fail("slot " + std::to_string(j->id) + " is serving a request; retry when it is idle");
      j->run(s);
    } catch (...) {
      error = std::current_exception();
    }
    // /slots reads the stats: they show the job's effect before its caller gets the answer.
    {
      std::lock_guard<std::mutex> l(mu_);
      refresh_slot_stats();
    }
    if (error)
      j->done.set_exception(error);
    else
      j->done.set_value();
  }
}

void Scheduler::loop() {
  for (;;) {
    const auto busy = [&] { return std::any_of(slots_.begin(), slots_.end(), [](auto& s) { return s->busy(); }); };
    {
      std::unique_lock<std::mutex> l(mu_);
      if (!busy()) cv_.wait_for(l, std::chrono::milliseconds(100), [&] { return stop_ || !queue_.empty() || !jobs_.empty(); });
      if (stop_) break;
    }
    run_jobs();  // slot files, on idle slots, before anything new is admitted
    {
      std::unique_lock<std::mutex> l(mu_);
      admit();
      stats_.queue_length = static_cast<int>(queue_.size());
      if (!busy()) continue;
    }
    step();
  }
  // Shutting down: every request still running or waiting ends with an error.
  std::lock_guard<std::mutex> l(mu_);
  for (auto& j : jobs_) j->done.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
  jobs_.clear();
  for (auto& s : slots_)
    if (s->busy()) s->fail("the server is shutting down");
  for (auto& t : queue_) t->finish("", static_cast<int>(t->req.prompt.size()), 0, 0, "the server is shutting down");
  queue_.clear();
}

void Scheduler::step() {
  uint64_t cancelled = 0, failed = 0, finished = 0, generated = 0, rows = 0, chunks = 0, shared = 0;
  double decode_s = 0, prefill_s = 0;
  for (auto& s : slots_)
    if (s->busy() && s->task()->cancelled()) {
      generated += static_cast<uint64_t>(s->n_generated());
      s->release();
      ++cancelled;
    }

  // One decode step for every slot that has a token to evaluate.
  std::vector<Slot*> decoding;
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens;
  for (auto& s : slots_)
    if (s->decoding()) {
      decoding.push_back(s.get());
      sessions.push_back(&s->session());
      tokens.push_back(s->pending());
    }
  if (!decoding.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<float>> logits;
    try {
      decode_sessions(sessions, tokens, &logits);
      for (size_t i = 0; i < decoding.size(); ++i) decoding[i]->decoded(logits[i]);
    } catch (const std::exception& e) {
      for (Slot* s : decoding)
        if (!s->finished()) {
          s->fail(std::string("decoding failed: ") + e.what());
          ++failed;
        }
    }
    decode_s = seconds_since(t0);
    rows = decoding.size();
  }

  // Then the next chunk of waiting prompts, about n_batch tokens in all, taking turns.
  int budget = cfg_.n_batch;
  for (size_t k = 0; k < slots_.size() && budget > 0; ++k) {
    Slot& s = *slots_[(prefill_rr_ + k) % slots_.size()];
    if (!s.prefilling() || s.awaiting_leader()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const int n = s.prefill(cfg_.n_batch);
      budget -= n;
      chunks += n > 0;
    } catch (const std::exception& e) {
      s.fail(std::string("prefill failed: ") + e.what());
      ++failed;
    }
    prefill_s += seconds_since(t0);
    if (budget <= 0) prefill_rr_ = (prefill_rr_ + k + 1) % slots_.size();
  }

  trim_prompt_cache();  // a prefill may have saved its prompt

  // Followers of n > 1 choices take their leader's prompt once it is prefilled.
  for (auto& s : slots_) {
    if (!s->awaiting_leader()) continue;
    const std::shared_ptr<const Task> leader = s->task()->req.prefill_leader.lock();
    const Slot* from = nullptr;
    for (auto& o : slots_)
      if (leader && o->busy() && o->task() == leader.get()) from = o.get();
    if (from && from->prefilling()) continue;
    if (!from || !from->prompt_shareable()) {  // the leader is gone or has moved on: prefill alone
      s->stop_awaiting();
      continue;
    }
    try {
      shared += static_cast<uint64_t>(s->share_prompt_of(*from));
    } catch (const std::exception& e) {
      s->fail(std::string("sharing the prompt failed: ") + e.what());
      ++failed;
    }
  }

  for (auto& s : slots_)
    if (s->finished()) {
      generated += static_cast<uint64_t>(s->n_generated());
      s->release();
      ++finished;
    }

  std::lock_guard<std::mutex> l(mu_);
  stats_.requests_cancelled += cancelled;
  stats_.requests_failed += failed;
  stats_.requests_finished += finished;
  stats_.generated_tokens += generated;
  stats_.decode_steps += rows > 0;
  stats_.decode_rows += rows;
  stats_.prefill_chunks += chunks;
  stats_.prompt_cache_bytes = prompt_cache_.bytes();
  stats_.prompt_cache_entries = prompt_cache_.entries();
  stats_.cached_prompt_tokens += shared;
  stats_.decode_seconds += decode_s;
  stats_.prefill_seconds += prefill_s;
  refresh_slot_stats();
}

void Scheduler::refresh_slot_stats() {
  idle_slots_ = 0;
  stats_.slots_busy = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const bool busy = slots_[i]->busy();
    idle_slots_ += !busy;
    stats_.slots_busy += busy;
    stats_.kv_bytes[i] = slots_[i]->kv_bytes();
    stats_.kv_store_bytes[i] = slots_[i]->kv_store_bytes();
    stats_.kv_planned[i] = busy ? slots_[i]->planned_bytes() : 0;
    stats_.history[i] = slots_[i]->history_size();
    stats_.busy[i] = busy;
  }
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace slake::server
