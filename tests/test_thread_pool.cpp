#include <atomic>

#include "slake/error.h"
#include "slake/thread_pool.h"
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

TEST(ThreadPool, RejectsBadSizes) {
  EXPECT_THROW(ThreadPool(0), Error);
  EXPECT_THROW(ThreadPool(-3), Error);
}

}  // namespace
}  // namespace slake
