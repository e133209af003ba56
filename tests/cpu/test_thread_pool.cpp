#include <atomic>

#include "slake/error.h"
#include "slake/cpu/thread_pool.h"
#include "test_util.h"

namespace slake {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> max_thread{0};
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int tid) {
          EXPECT_LE(e - b, grain);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          int cur = max_thread.load();
          while (tid > cur && !max_thread.compare_exchange_weak(cur, tid)) {}
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
        EXPECT_LT(max_thread.load(), threads);
      }
    }
  }
}

// An exception in any chunk, on any thread, reaches the caller; the pool stays usable.
TEST(ThreadPool, RethrowsAnExceptionFromAnyChunk) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t bad : {0, 5, 99}) {
      std::atomic<int> after_bad{0};
      EXPECT_THROW(pool.parallel_for(100, 1,
                                     [&](int64_t b, int64_t, int) {
                                       if (b == bad) fail("chunk " + std::to_string(b));
                                       if (b > bad) after_bad++;
                                     }),
                   Error)
          << threads << " threads, bad chunk " << bad;
    }
    std::atomic<int64_t> sum{0};
    pool.parallel_for(10, 1, [&](int64_t b, int64_t, int) { sum += b; });
    EXPECT_EQ(sum.load(), 45);
  }
}

// Jobs issued back to back (the spinning hand-off) still cover everything exactly once.
TEST(ThreadPool, ManyShortJobsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 2000; ++job) pool.parallel_for(4, 1, [&](int64_t b, int64_t e, int) { total += e - b; });
  EXPECT_EQ(total.load(), 8000);
}

TEST(ThreadPool, RejectsBadSizes) {
  EXPECT_THROW(ThreadPool(0), Error);
  EXPECT_THROW(ThreadPool(-3), Error);
}

}  // namespace
}  // namespace slake
