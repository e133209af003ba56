// matmul (src/cpu/ops.cpp) over every weight type in the file's layout against float64 sums:
// ragged row and token counts, 1 and 2 threads, the float panel kernel at prompt sizes.
#include <gtest/gtest.h>

#include <random>

#include "quant/quant_test_util.h"

namespace slake {
namespace {

using namespace test;

// matmul over ragged row counts and token counts (tiles cut at both edges, chunks across threads)
// equals the float64 sums.
TEST(Matmul, RaggedShapesAndThreadsMatchFloat64) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::IQ4_XS}) {
    const int64_t K = dtype_info(t).block_elems == 256 ? 512 : 96, N = 37;
    std::mt19937 rng(static_cast<unsigned>(t) + 100);
    const auto w = random_rows(t, N, K, rng);
    // 17 and 33: AMX groups of 16 tokens with a ragged rest, and the panel kernel for float weights
    expect_matmul_matches_float64(view_of(t, K, N, w), w, {1, 3, 9, 17, 33}, rng);
  }
}

// Float weights at prompt sizes go through the panel kernel (matmul_panel.cpp): rows past a
// panel's 32, K past one panel block of 2048 with a ragged end, and token tiles of 12, 4 and 1.
TEST(Matmul, PromptSizedFloatProductsMatchFloat64) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const int64_t K = 4100, N = 45;
    std::mt19937 rng(static_cast<unsigned>(t) + 300);
    const auto w = random_rows(t, N, K, rng);
    expect_matmul_matches_float64(view_of(t, K, N, w), w, {16, 29}, rng);  // 29 = 12 + 12 + 4 + 1
  }
}

}  // namespace
}  // namespace slake
