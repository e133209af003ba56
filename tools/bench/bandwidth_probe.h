// A short measurement of the machine's memory read bandwidth: every thread sums its share of a
// buffer much larger than the caches, best of a few passes. Decode is bound by this figure, so
// slake-bench prints achieved GB/s next to it.
#pragma once
#include <cstddef>

#include "slake/cpu/thread_pool.h"

namespace slake::bench {

// Bytes per second; `bytes` is the buffer size (default 512 MiB), `passes` the repetitions.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{512} << 20, int passes = 5);

}  // namespace slake::bench
