// Argmax per row against slake::argmax (std::max_element: the first of equal maxima), on row
// lengths around the block size, with ties and rows of -inf.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "slake/logit_stats.h"

namespace slake::gpu::test {
namespace {

TEST(KernelArgmax, MatchesTheCpuArgmaxIncludingTies) {
  for (const int n : {1, 7, 255, 256, 257, 32000 + 13}) {
    const int rows = 6;
    std::vector<float> x = random_floats(static_cast<size_t>(rows) * n, 40 + n, -5.0f, 5.0f);
    if (n > 3) {
      for (int r = 0; r < rows; ++r) x[static_cast<size_t>(r) * n + static_cast<size_t>(n - 1 - r % n)] = 9.0f;  // one maximum
      x[static_cast<size_t>(1) * n + 2] = x[static_cast<size_t>(1) * n + static_cast<size_t>(n - 2)] = 11.0f;   // tie: first wins
      x[static_cast<size_t>(2) * n + 0] = x[static_cast<size_t>(2) * n + static_cast<size_t>(n - 3)] = 12.0f;
    }
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(3) * n + i] = -INFINITY;  // all -inf: index 0
    DeviceBuffer<float> dx(x);
    DeviceBuffer<int32_t> out(static_cast<size_t>(rows));
    argmax(out.get(), dx.get(), rows, n);
    const std::vector<int32_t> got = out.download();
    for (int r = 0; r < rows; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], slake::argmax(x.data() + static_cast<size_t>(r) * n, n)) << "n " << n << " row " << r;
  }
}

}  // namespace
}  // namespace slake::gpu::test
