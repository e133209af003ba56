#include "slake/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "slake/error.h"

namespace slake {

int default_thread_count() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1 || n_threads > 1024) fail("thread count must be between 1 and 1024, got " + std::to_string(n_threads));
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

namespace {
// Waits for done() by spinning, for about `budget`; returns done(). After the first few
// microseconds every check also yields the core, so that when there are more runnable threads
// than cores (another process, or parallel test runs) the spinner does not hold back the thread
// it is waiting for.
template <class Done>
bool spin_until(Done done, std::chrono::microseconds budget) {
  const auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (yielding) {
      std::this_thread::yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if ((i & 63) == 63) {
      const auto elapsed = std::chrono::steady_clock::now() - start;
      if (elapsed > budget) return done();
      yielding = elapsed > std::chrono::microseconds(20);
    }
  }
}
constexpr std::chrono::microseconds kSpin{200};
}  // namespace

void ThreadPool::run_chunks(int index) {
  for (;;) {
    const int64_t b = next_.fetch_add(grain_);
    if (b >= n_) break;
    try {
      (*fn_)(b, std::min(n_, b + grain_), index);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_);  // no further chunks
      break;
    }
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto job_or_stop = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(job_or_stop, kSpin)) {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, job_or_stop);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks(index);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain), 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    error_ = nullptr;
    next_.store(0);
    active_.store(n_threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  run_chunks(0);
  const auto all_done = [&] { return active_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(all_done, kSpin)) {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, all_done);
  }
  fn_ = nullptr;
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(e, error_);
  }
  if (e) std::rethrow_exception(e);
}

}  // namespace slake
