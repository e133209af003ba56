// A persistent pool of worker threads. parallel_for splits [0, n) into chunks handed out
// dynamically; the calling thread works too, so a pool of size 1 runs everything inline.
// Between jobs the workers spin briefly before they sleep, because a forward pass issues jobs
// back to back (a few microseconds apart on small models) and a futex wake per job would cost
// more than the job. An exception thrown by fn stops the handing out of chunks and is rethrown by
// parallel_for once every thread has left the job.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace slake {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end, thread_index) over chunks of at most `grain` items covering [0, n).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker(int index);
  void run_chunks(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;  // the first exception of the current job (under mu_)
  // The current job.
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
};

// Threads to use by default: the hardware's count.
int default_thread_count();

}  // namespace slake
