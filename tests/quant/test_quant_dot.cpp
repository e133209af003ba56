// The dot-product tiles (SIMD and portable) against float64 sums over the dequantised weights
// and the dequantised (prepared) activations, and the activation quantisation against the fp32
// values it stands for. The repacked layouts are tested in test_weight_pack.cpp, matmul in
// tests/cpu/test_ops.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/quant_test_util.h"
#include "slake/error.h"
#include "slake/quant/quant_blocks.h"

namespace slake {
namespace {

using namespace test;

struct Case {
  DType type;
  int64_t K;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.type)) + "_K" + std::to_string(info.param.K);
}

class DotTile : public ::testing::TestWithParam<Case> {};

// Every tile shape, both implementations, against the float64 sum.
TEST_P(DotTile, EveryTileShapeMatchesFloat64) {
  const auto [t, K] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(K) * 31 + static_cast<unsigned>(t));
  const int R = tile_rows_max(t);  // 8 where a wide kernel takes them (Q4_0 on AVX2)
  const auto w = random_rows(t, R, K, rng);
  const auto x = random_floats(kTileTokens * K, rng);
  const Prepared a = prepare(t, x, kTileTokens, K);
  std::vector<double> want, mag;
  reference(t, w, R, K, a, kTileTokens, &want, &mag);
  const size_t wb = row_bytes(t, K);
  for (int rm = 1; rm <= R; ++rm)
    for (int rn = 1; rn <= kTileTokens; ++rn) {
      std::vector<float> simd(static_cast<size_t>(R) * kTileTokens, NAN), port(simd), prompt(simd);
      dot_tile(t, K, w.data(), wb, rm, a.bytes.data(), a.row_bytes, rn, simd.data(), R);
      dot_tile(t, K, w.data(), wb, rm, a.bytes.data(), a.row_bytes, rn, prompt.data(), R, /*prompt=*/true);
      portable::dot_tile(t, K, w.data(), wb, rm, a.bytes.data(), a.row_bytes, rn, port.data(), R);
      expect_tile(simd, want, mag, R, rm, rn, std::string("simd ") + dtype_name(t));
      expect_tile(prompt, want, mag, R, rm, rn, std::string("simd, prompt kernels ") + dtype_name(t));
      expect_tile(port, want, mag, R, rm, rn, std::string("portable ") + dtype_name(t));
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DotTile,
                         ::testing::Values(Case{DType::F32, 64}, Case{DType::F32, 37}, Case{DType::F32, 1000},
                                           Case{DType::F16, 48}, Case{DType::F16, 23}, Case{DType::BF16, 64},
                                           Case{DType::BF16, 71}, Case{DType::Q8_0, 32}, Case{DType::Q8_0, 96}, Case{DType::Q8_0, 2048},
                                           Case{DType::Q4_0, 64}, Case{DType::Q4_0, 160}, Case{DType::Q4_0, 2048}, Case{DType::Q4_K, 256},
                                           Case{DType::Q4_K, 1024}, Case{DType::Q6_K, 256}, Case{DType::Q6_K, 1024},
                                           Case{DType::Q4_1, 32}, Case{DType::Q4_1, 576}, Case{DType::Q5_0, 64}, Case{DType::Q5_0, 32}, Case{DType::Q5_0, 96},
                                           Case{DType::Q5_0, 1536}, Case{DType::Q5_1, 96}, Case{DType::Q5_1, 576},
                                           Case{DType::IQ4_NL, 32}, Case{DType::IQ4_NL, 2048}, Case{DType::Q2_K, 256},
                                           Case{DType::Q2_K, 1536}, Case{DType::Q3_K, 256}, Case{DType::Q3_K, 1024},
                                           Case{DType::Q5_K, 256}, Case{DType::Q5_K, 1536}, Case{DType::IQ4_XS, 256},
                                           Case{DType::IQ4_XS, 1024}),
                         case_name);

// dot_rows16_q8_0 (the recall store's keys and page summaries): every row count up to 16, block
// counts odd and even, any number of activation rows, against the float64 sum.
TEST(DotRows16, EveryRowCountMatchesFloat64) {
  for (const int64_t K : {32, 64, 96, 128, 512}) {
    std::mt19937 rng(static_cast<unsigned>(K) * 7 + 1);
    constexpr int R = kRows16, N = kTileTokens;
    const auto w = random_rows(DType::Q8_0, R, K, rng);
    const auto x = random_floats(N * K, rng);
    const Prepared a = prepare(DType::Q8_0, x, N, K);
    std::vector<double> want, mag;
    reference(DType::Q8_0, w, R, K, a, N, &want, &mag);
    for (int rm = 1; rm <= R; ++rm)
      for (int rn = 1; rn <= N; ++rn) {
        // Exactly rm rows, so that a read past them is outside the buffer (ASan).
        const std::vector<uint8_t> rows(w.begin(), w.begin() + static_cast<ptrdiff_t>(rm * row_bytes(DType::Q8_0, K)));
        std::vector<float> got(static_cast<size_t>(R) * N, NAN);
        dot_rows16_q8_0(K, rows.data(), row_bytes(DType::Q8_0, K), rm, a.bytes.data(), a.row_bytes, rn, got.data(), R);
        expect_tile(got, want, mag, R, rm, rn, "dot_rows16_q8_0 K " + std::to_string(K));
      }
  }
}

// The low-rank first pass's kernel (kv_recall.h): tiles of 16 lanes of r unsigned bytes (value +
// 128, 4 per lane at a time) after their 16 fp16 scales, against int8 rows: per tile and row the
// largest lane (of the first `valid_last` in the last tile), for 1 to 3 tiles and across the
// kernel's blocks of 16 (16, 17, 33, 35), every lane count of the last, up to 4 rows, against
// float64 sums over the same integers. Bytes 0 and 255 (values -128 and
// 127) included; exactly the bytes read, for ASan.
TEST(MaxDotLanes16, EveryLaneCountMatchesFloat64) {
  for (const int r : {4, 16, 32, 64}) {
    std::mt19937 rng(static_cast<unsigned>(r) + 3);
    std::uniform_int_distribution<int> byte(0, 255), val(-127, 127);
    std::uniform_real_distribution<float> pos(0.001f, 2.0f);
    const size_t stride = 32 + static_cast<size_t>(16 * r);
    constexpr int kMostTiles = 35;
    std::vector<uint8_t> tiles(kMostTiles * stride);
    for (size_t t = 0; t < kMostTiles; ++t) {
      for (int j = 0; j < 16; ++j) {
        const uint16_t h = fp32_to_fp16(pos(rng));
        std::memcpy(&tiles[t * stride + 2 * static_cast<size_t>(j)], &h, 2);
      }
      for (size_t b = 32; b < stride; ++b) tiles[t * stride + b] = static_cast<uint8_t>(byte(rng));
      tiles[t * stride + 32] = 0, tiles[t * stride + 33] = 255;
    }
    std::vector<int8_t> q(static_cast<size_t>(4 * r));
    for (auto& x : q) x = static_cast<int8_t>(val(rng));
    const float q_scale[4] = {0.5f, 0.013f, 1.7f, 0.25f};
    int32_t q_sum[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < r; ++i) q_sum[k] += q[static_cast<size_t>(k * r + i)];
    for (const int n_tiles : {1, 2, 3, 16, 17, 33, kMostTiles})
      for (int valid = 1; valid <= 16; ++valid)
        for (int rn = 1; rn <= 4; ++rn) {
          const std::vector<uint8_t> used(tiles.begin(), tiles.begin() + static_cast<ptrdiff_t>(n_tiles * stride));
          const size_t os = kMostTiles + 2;
          std::vector<float> got(4 * os, NAN);
          max_dot_lanes16_u8(r, used.data(), stride, n_tiles, valid, q.data(), static_cast<size_t>(r), q_scale, q_sum, rn, got.data(), os);
          for (int k = 0; k < rn; ++k)
            for (int t = 0; t < n_tiles; ++t) {
              const uint8_t* tile = used.data() + static_cast<size_t>(t) * stride;
              double want = -INFINITY;
              for (int j = 0; j < (t + 1 == n_tiles ? valid : 16); ++j) {
                double sum = 0;
                for (int i = 0; i < r; ++i)
                  sum += (static_cast<double>(tile[32 + 64 * (i / 4) + 4 * j + i % 4]) - 128) * q[static_cast<size_t>(k * r + i)];
                uint16_t h;
                std::memcpy(&h, tile + 2 * j, 2);
                want = std::max(want, sum * fp16_to_fp32(h) * q_scale[k]);
              }
              ASSERT_NEAR(got[static_cast<size_t>(k) * os + static_cast<size_t>(t)], want, 1e-6 * std::abs(want) + 1e-30)
                  << "r " << r << " tiles " << n_tiles << " valid " << valid << " row " << k << " tile " << t;
            }
          for (int k = 0; k < 4; ++k)  // nothing written past the tiles or the rows
            for (size_t t = k < rn ? static_cast<size_t>(n_tiles) : 0; t < os; ++t)
              ASSERT_TRUE(std::isnan(got[static_cast<size_t>(k) * os + t])) << "tiles " << n_tiles << " rows " << rn << " wrote " << k << ", " << t;
        }
  }
}

// Q8_0 activations: each value within half a step of its fp32 original (the step is the block's
// fp16 scale), and the scale is the block's largest magnitude / 127.
// The largest Q4_0 x Q8_0 products (nibbles 15 or 0 against activations of +-127): the wide
// kernel adds 8 int16 pair sums per block, which must not wrap. Scales of 1, so the exact dot
// products are small integers.
TEST(DotTile, Q4_0ExtremesDoNotWrap) {
  const int R = tile_rows_max(DType::Q4_0);
  constexpr int64_t K = 64;
  std::vector<uint8_t> w(static_cast<size_t>(R) * 2 * 18);
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < 2; ++b) {
      uint8_t* blk = &w[static_cast<size_t>(r * 2 + b) * 18];
      blk[0] = 0x00;  // fp16 1.0 = 0x3C00
      blk[1] = 0x3C;
      std::memset(blk + 2, r % 2 ? 0x00 : 0xFF, 16);  // nibbles 15 (q = 7) or 0 (q = -8)
    }
  for (int8_t sign : {1, -1}) {
    std::vector<ActBlockQ8_0> a(2);
    for (auto& blk : a) {
      blk.d = 0x3C00;
      for (auto& q : blk.qs) q = static_cast<int8_t>(127 * sign);
    }
    std::vector<float> out(static_cast<size_t>(R), NAN);
    dot_tile(DType::Q4_0, K, w.data(), 36, R, reinterpret_cast<const uint8_t*>(a.data()), sizeof(ActBlockQ8_0) * 2, 1,
             out.data(), R);
    for (int r = 0; r < R; ++r) EXPECT_EQ(out[static_cast<size_t>(r)], (r % 2 ? -8.0f : 7.0f) * 127 * sign * 64) << r;
  }
}

// The IQ4 table's extreme (-127) against activations of -127 and 127: each pair sum of the
// non-VNNI path (2 * 127 * 127 = 32258) is just inside int16. Scales of 1, so the exact dot
// products are integers; IQ4_XS's sub-block scale is 1 (ls = 33).
TEST(DotTile, IQ4ExtremesDoNotSaturate) {
  const int64_t K = 256;
  std::vector<uint8_t> nl(static_cast<size_t>(K / 32) * 18, 0), xs(136, 0);
  for (size_t b = 0; b < nl.size(); b += 18) nl[b + 1] = 0x3C;  // fp16 1.0; nibbles 0: -127
  xs[1] = 0x3C;
  xs[2] = 0xAA, xs[3] = 0xAA;  // scales_h: 2 per sub-block (high bits 10b = 32)
  xs[4] = xs[5] = xs[6] = xs[7] = 0x11;  // scales_l: 1 -> ls = 33, scale 1
  for (int8_t sign : {1, -1}) {
    std::vector<float> x(static_cast<size_t>(K), 127.0f * sign);
    const int64_t want = -127 * 127 * K * sign;
    for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
      std::vector<uint8_t> a(act_row_bytes(act_format(t), K));
      quantize_act_row(act_format(t), x.data(), a.data(), K);
      const uint8_t* w = t == DType::IQ4_NL ? nl.data() : xs.data();
      for (int rn = 1; rn <= kTileTokens; ++rn) {  // the same activation row in every token slot
        std::vector<uint8_t> acts(a.size() * static_cast<size_t>(rn));
        for (int j = 0; j < rn; ++j) std::memcpy(acts.data() + a.size() * static_cast<size_t>(j), a.data(), a.size());
        std::vector<float> out(static_cast<size_t>(rn), NAN), port(out);
        dot_tile(t, K, w, row_bytes(t, K), 1, acts.data(), a.size(), rn, out.data(), 1);
        portable::dot_tile(t, K, w, row_bytes(t, K), 1, acts.data(), a.size(), rn, port.data(), 1);
        for (int j = 0; j < rn; ++j) {
          EXPECT_EQ(out[static_cast<size_t>(j)], static_cast<float>(want)) << dtype_name(t) << " rn " << rn;
          EXPECT_EQ(port[static_cast<size_t>(j)], static_cast<float>(want)) << dtype_name(t) << " rn " << rn;
        }
      }
    }
  }
}

// The largest K-quant products: every quant and scale bit set (Q6_K's quants at 63, Q5_K's at 31,
// Q6_K's int8 scales at -1), d and dmin 1, against activations of +-127. The int16 pair sums of
// the SIMD tiles must not saturate; every term is an integer, so the sums are exact in fp32 and
// equal the float64 dot product over the dequantised weights.
TEST(DotTile, KQuantExtremesDoNotSaturate) {
  constexpr int64_t K = 512;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const size_t bb = row_bytes(t, 256);
    std::vector<uint8_t> w(2 * bb, 0xFF);
    for (size_t b = 0; b < 2; ++b)
      for (int off : fp16_fields(t)) w[b * bb + off] = 0x00, w[b * bb + off + 1] = 0x3C;
    std::vector<float> deq(K);
    dequantize_row(t, w.data(), deq.data(), K);
    for (int sign : {1, -1}) {
      std::vector<float> x(static_cast<size_t>(K), 127.0f * static_cast<float>(sign));
      double want = 0.0;
      for (int64_t k = 0; k < K; ++k) want += static_cast<double>(deq[k]) * x[k];
      std::vector<uint8_t> a(act_row_bytes(act_format(t), K));
      quantize_act_row(act_format(t), x.data(), a.data(), K);
      for (int rn = 1; rn <= kTileTokens; ++rn) {  // the same activation row in every token slot
        std::vector<uint8_t> acts(a.size() * rn);
        for (int j = 0; j < rn; ++j) std::memcpy(acts.data() + a.size() * j, a.data(), a.size());
        std::vector<float> out(rn, NAN);
        dot_tile(t, K, w.data(), row_bytes(t, K), 1, acts.data(), a.size(), rn, out.data(), 1);
        for (int j = 0; j < rn; ++j) EXPECT_EQ(out[j], static_cast<float>(want)) << dtype_name(t) << " rn " << rn;
      }
    }
  }
}

// Q8_1 (for Q4_1/Q5_1): the same quants and scale as Q8_0, and s the exact sum they stand for.
TEST(ActivationQuantisation, Q8_1IsQ8_0WithItsSum) {
  std::mt19937 rng(9);
  const auto x = random_floats(128, rng);
  std::vector<ActBlockQ8_0> q0(4);
  std::vector<ActBlockQ8_1> q1(4);
  quantize_act_row(ActFormat::Q8_0, x.data(), q0.data(), 128);
  quantize_act_row(ActFormat::Q8_1, x.data(), q1.data(), 128);
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(q1[b].d, fp16_to_fp32(q0[b].d));
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(q1[b].qs[j], q0[b].qs[j]);
      sum += q1[b].qs[j];
    }
    EXPECT_EQ(q1[b].s, q1[b].d * static_cast<float>(sum));
  }
}

TEST(ActivationQuantisation, Q8_0WithinHalfAStep) {
  std::mt19937 rng(7);
  auto x = random_floats(256, rng);
  x[40] = 0.0f;
  for (int j = 64; j < 96; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero block
  std::vector<ActBlockQ8_0> q(8);
  quantize_act_row(ActFormat::Q8_0, x.data(), q.data(), 256);
  for (int b = 0; b < 8; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[static_cast<size_t>(32 * b + j)]));
    const float d = fp16_to_fp32(q[static_cast<size_t>(b)].d);
    EXPECT_NEAR(d, amax / 127.0f, amax / 127.0f * 1e-3);
    for (int j = 0; j < 32; ++j) {
      const float v = x[static_cast<size_t>(32 * b + j)];
      // d is rounded to fp16 after the quants were chosen: allow its relative rounding too.
      EXPECT_LE(std::abs(d * q[static_cast<size_t>(b)].qs[j] - v), 0.5f * d + 1e-3f * amax) << b << "," << j;
    }
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q[2].qs[j], 0);
}

// Q8_K: the value of largest magnitude maps to -127 or 127 exactly, the others within half a step,
// and bsums are the sums of each 16 quants.
TEST(ActivationQuantisation, Q8_KScalesAndSums) {
  std::mt19937 rng(8);
  const auto x = random_floats(512, rng);
  std::vector<ActBlockQ8_K> q(2);
  quantize_act_row(ActFormat::Q8_K, x.data(), q.data(), 512);
  for (int b = 0; b < 2; ++b) {
    const ActBlockQ8_K& blk = q[static_cast<size_t>(b)];
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::abs(x[static_cast<size_t>(256 * b + j)]));
    EXPECT_NEAR(std::abs(blk.d) * 127.0f, amax, amax * 1e-6);
    for (int j = 0; j < 256; ++j)
      EXPECT_LE(std::abs(blk.d * blk.qs[j] - x[static_cast<size_t>(256 * b + j)]), 0.5f * std::abs(blk.d) * 1.0001f);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += blk.qs[16 * g + j];
      EXPECT_EQ(blk.bsums[g], s);
    }
  }
}

}  // namespace
}  // namespace slake
