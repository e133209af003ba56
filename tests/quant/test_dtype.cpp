// fp16/bf16 conversion against the CPU's own converters and exact arithmetic, and dequantisation
// against the gguf package's reference dequantisation (fixtures from models/make_test_models.py).
#include <immintrin.h>

#include <cmath>
#include <random>

#include "slake/quant/dtype.h"
#include "slake/format/gguf.h"
#include "test_util.h"

namespace slake {
namespace {

float bits_to_float_helper(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Fp16, AllHalvesDecodeExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const uint32_t e = (x >> 10) & 0x1F, m = x & 0x3FF;
    const float got = fp16_to_fp32(x);
    if (e == 31 && m != 0) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    // Independent: value = (-1)^s * m * 2^(e-25) + implicit bit, computed in double.
    double v = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                      : (e == 31 ? INFINITY : std::ldexp(static_cast<double>(m | 0x400), static_cast<int>(e) - 25));
    if (x & 0x8000) v = -v;
    EXPECT_EQ(bits(got), bits(static_cast<float>(v))) << "half 0x" << std::hex << h;
  }
}

#if defined(__F16C__)
TEST(Fp16, EncodeMatchesHardwareRoundToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = any(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    ASSERT_EQ(fp32_to_fp16(f), hw) << "float bits 0x" << std::hex << u;
  }
  // Every half value survives a round trip.
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 0x1F) == 31 && (h & 0x3FF)) continue;
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h);
  }
}
#endif

TEST(Bf16, RoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(b));
    EXPECT_EQ(bits(f), b << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(fp32_to_bf16(f), b);
    }
  }
  // Ties go to even; above the tie rounds up.
  EXPECT_EQ(fp32_to_bf16(bits_to_float_helper(0x3F808000u)), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(bits_to_float_helper(0x3F818000u)), 0x3F82);
  EXPECT_EQ(fp32_to_bf16(bits_to_float_helper(0x3F808001u)), 0x3F81);
}

class Dequant : public ::testing::TestWithParam<const char*> {};

TEST_P(Dequant, MatchesGgufReferenceBitForBit) {
  const std::string name = GetParam();
  GgufFile g = GgufFile::open(test::fixtures_dir() + "/quant/quant.gguf");
  const TensorView* t = g.find_tensor(name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::string(dtype_name(t->type)), name);
  const std::vector<float> want = test::read_f32(test::fixtures_dir() + "/quant/" + name + ".f32");
  ASSERT_EQ(static_cast<int64_t>(want.size()), t->n_elements());
  std::vector<float> got(static_cast<size_t>(t->row_len()));
  int64_t mismatches = 0;
  for (int64_t r = 0; r < t->n_rows(); ++r) {
    dequantize_row(t->type, t->row(r), got.data(), t->row_len());
    for (int64_t i = 0; i < t->row_len(); ++i)
      mismatches += bits(got[static_cast<size_t>(i)]) != bits(want[static_cast<size_t>(r * t->row_len() + i)]);
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Dequant, ::testing::Values("Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
                                                              "Q5_K", "IQ4_NL", "IQ4_XS"));

}  // namespace
}  // namespace slake
