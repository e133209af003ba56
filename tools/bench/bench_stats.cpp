#include "bench_stats.h"

#include <algorithm>
#include <cmath>

#include "slake/error.h"
#include "slake/logit_stats.h"

namespace slake::bench {

Summary summarize(const std::vector<double>& v) {
  if (v.empty()) fail("no samples to summarise");
  Summary s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  s.p50 = percentile(v, 50);
  s.p99 = percentile(v, 99);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

}  // namespace slake::bench
