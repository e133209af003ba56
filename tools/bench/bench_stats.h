// Summary statistics of repeated timings (slake-bench).
#pragma once
#include <vector>

namespace slake::bench {

struct Summary {
  double mean = 0, stddev = 0;  // stddev: sample standard deviation (n - 1), 0 for one sample
  double p50 = 0, p99 = 0;      // percentiles with linear interpolation (numpy's default)
  double min = 0, max = 0;
};

// Throws slake::Error for no samples.
Summary summarize(const std::vector<double>& samples);

}  // namespace slake::bench
