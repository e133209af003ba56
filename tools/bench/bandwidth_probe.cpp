#include "bandwidth_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

namespace slake::bench {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> buf(n);
  // First touch in parallel, so the pages spread like the threads that read them.
  const int64_t chunks = pool.size() * 16;
  pool.parallel_for(chunks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t c = b; c < e; ++c)
      std::fill(buf.begin() + static_cast<int64_t>(n) * c / chunks, buf.begin() + static_cast<int64_t>(n) * (c + 1) / chunks, 1.0f);
  });
  std::atomic<double> sink{0};
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(chunks, 1, [&](int64_t b, int64_t e, int) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t c = b; c < e; ++c) {
        const size_t lo = n * static_cast<size_t>(c) / static_cast<size_t>(chunks), hi = n * static_cast<size_t>(c + 1) / static_cast<size_t>(chunks);
        for (size_t i = lo; i + 8 <= hi; i += 8)
          for (int k = 0; k < 8; ++k) acc[k] += buf[i + static_cast<size_t>(k)];
      }
      double s = 0;
      for (float a : acc) s += a;
      sink.store(sink.load() + s);
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / secs);
  }
  return sink.load() >= 0 ? best : 0.0;  // the sink keeps the reads from being optimised away
}

}  // namespace slake::bench
