// The repacked layouts (src/quant/weight_pack.cpp: X4, X8, X16) and their group kernels: every row
// unpacks to the file's bytes, shapes outside a layout are refused, the group kernels (SIMD and
// the portable gather) and matmul over the groups match float64 sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "quant/quant_test_util.h"
#include "slake/error.h"
#include "slake/quant/quant_blocks.h"

namespace slake {
namespace {

using namespace test;

// Repacking into interleaved groups of 4 rows (weight_pack.h) moves bytes only: every row comes
// back unchanged, and no two rows' bytes land in the same place.
TEST(RepackX4, EveryRowUnpacksToTheFileBytes) {
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (int64_t K : {128, 384, 2048}) {  // whole runs: 1, 3 and 16 of Q4_0's 4 blocks
      const int64_t N = 12;
      std::mt19937 rng(static_cast<unsigned>(K) + static_cast<unsigned>(t));
      const auto w = random_rows(t, N, K, rng);
      std::vector<uint8_t> packed(w.size());
      const TensorView P = pack_x4(view_of(t, K, N, w), packed.data());
      ASSERT_EQ(P.layout, WeightLayout::X4);
      EXPECT_NE(packed, w);  // it is a different layout
      expect_rows_unpack_to_file_bytes(P, w, unpack_x4_row);
    }
}

TEST(RepackX4, RefusesShapesOutsideTheLayout) {
  std::vector<uint8_t> bytes(row_bytes(DType::Q4_0, 96) * 8);
  TensorView W;
  W.name = "blk.0.attn_q.weight";
  W.type = DType::Q4_0;
  W.ne = {96, 8};  // 3 blocks per row: not whole runs
  W.data = bytes.data();
  W.nbytes = bytes.size();
  EXPECT_FALSE(repack_x4_applies(W));
  EXPECT_THROW(pack_x4(W, bytes.data()), Error);
  W.ne = {64, 8};  // 2 blocks: a run of Q8_0, not of Q4_0
  EXPECT_THROW(pack_x4(W, bytes.data()), Error);
  std::vector<uint8_t> q8(row_bytes(DType::Q8_0, 64) * 8), q8_packed(q8.size());
  TensorView Q8 = W;
  Q8.type = DType::Q8_0;
  Q8.data = q8.data();
  Q8.nbytes = q8.size();
  EXPECT_NO_THROW(pack_x4(Q8, q8_packed.data()));
  W.ne = {64, 6};  // 6 rows: not whole groups
  EXPECT_FALSE(repack_x4_applies(W));
  W.type = DType::F16;
  W.ne = {64, 8};
  EXPECT_FALSE(repack_x4_applies(W));
}

// The group kernel (SIMD where built, and the portable gather) against float64, every token count.
TEST(RepackX4, GroupKernelMatchesFloat64) {
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (int64_t K : {128, 384, 2048}) {  // whole runs: 1, 3 and 16 of Q4_0's 4 blocks
      std::mt19937 rng(static_cast<unsigned>(K) * 7 + static_cast<unsigned>(t));
      expect_group_kernel_matches_float64(
          t, K, kGroupRows, rng, [](const TensorView& v, uint8_t* dst) { return pack_x4(v, dst); },
          [&](const uint8_t* g, const Prepared& a, int rn, float* out) { dot_tile_x4(t, K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRows); },
          [&](const uint8_t* g, const Prepared& a, int rn, float* out) {
            portable::dot_tile_x4(t, K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRows);
          });
    }
}

// matmul over a repacked view: ragged token counts, several chunks, 1 and 2 threads.
TEST(RepackX4, MatmulOverGroupsMatchesFloat64) {
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    const int64_t K = 128, N = 72;
    std::mt19937 rng(static_cast<unsigned>(t) + 200);
    const auto w = random_rows(t, N, K, rng);
    std::vector<uint8_t> packed(w.size());
    const TensorView P = pack_x4(view_of(t, K, N, w), packed.data());
    // 17 and 33: on AMX, the groups are unpacked for its tiles
    expect_matmul_matches_float64(P, w, {1, 2, 5, 17, 33}, rng);
  }
}

// The X8 layout (Q4_0 in groups of 8 rows, AVX2 builds without VNNI).
TEST(RepackX8, EveryRowUnpacksToTheFileBytes) {
  for (int64_t K : {32, 96, 2048}) {
    const int64_t N = 16;
    std::mt19937 rng(static_cast<unsigned>(K) + 77);
    const auto w = random_rows(DType::Q4_0, N, K, rng);
    std::vector<uint8_t> packed(w.size());
    const TensorView P = pack_x8(view_of(DType::Q4_0, K, N, w), packed.data());
    ASSERT_EQ(P.layout, WeightLayout::X8);
    EXPECT_NE(packed, w);
    expect_rows_unpack_to_file_bytes(P, w, unpack_x8_row);
  }
}

TEST(RepackX8, RefusesShapesOutsideTheLayout) {
  std::vector<uint8_t> bytes(row_bytes(DType::Q4_0, 64) * 12);
  TensorView W = view_of(DType::Q4_0, 64, 12, bytes);  // 12 rows: not whole groups of 8
  EXPECT_FALSE(repack_x8_applies(W));
  EXPECT_THROW(pack_x8(W, bytes.data()), Error);
  W.ne = {64, 8};
  EXPECT_EQ(repack_x8_applies(W), x8_kernel_available());  // only where its kernel is built
  W.type = DType::Q8_0;
  EXPECT_FALSE(repack_x8_applies(W));
  EXPECT_THROW(pack_x8(W, bytes.data()), Error);
}

// The group kernel (SIMD where built, and the portable gather) against float64, every token count.
TEST(RepackX8, GroupKernelMatchesFloat64) {
  for (int64_t K : {32, 96, 2048}) {
    std::mt19937 rng(static_cast<unsigned>(K) * 13 + 5);
    expect_group_kernel_matches_float64(
        DType::Q4_0, K, kGroupRowsX8, rng, [](const TensorView& v, uint8_t* dst) { return pack_x8(v, dst); },
        [&](const uint8_t* g, const Prepared& a, int rn, float* out) { dot_tile_x8(K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRowsX8); },
        [&](const uint8_t* g, const Prepared& a, int rn, float* out) {
          portable::dot_tile_x8(K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRowsX8);
        });
  }
}

TEST(RepackX8, MatmulOverGroupsMatchesFloat64) {
  const int64_t K = 96, N = 72;
  std::mt19937 rng(321);
  const auto w = random_rows(DType::Q4_0, N, K, rng);
  std::vector<uint8_t> packed(w.size());
  const TensorView P = pack_x8(view_of(DType::Q4_0, K, N, w), packed.data());
  expect_matmul_matches_float64(P, w, {1, 2, 5, 17, 33}, rng);
}

// The X16 layout (the K-quants, IQ4_XS, the 32-element types and Q8_0 in transposed groups of 16
// rows): every row unpacks to the file's bytes (a re-encoding of every field, so any lost bit
// shows), through row_in_file_layout too.
constexpr DType kX16Types[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                               DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q8_0};

// Row lengths for a test: the K-quants' `kquant`, the 32-element types' `block32` (not whole runs of
// X4's 128 Q4_0 elements, nor of the kernel's chunk of 8 blocks).
std::vector<int64_t> x16_lengths(DType t, std::vector<int64_t> kquant, std::vector<int64_t> block32) {
  return x16_block32_type(t) ? block32 : kquant;
}

TEST(RepackX16, EveryRowUnpacksToTheFileBytes) {
  for (DType t : kX16Types)
    for (int64_t K : x16_lengths(t, {256, 768}, {32, 576})) {
      const int64_t N = 32;
      std::mt19937 rng(static_cast<unsigned>(K) + 31 * static_cast<unsigned>(t));
      const auto w = random_rows(t, N, K, rng);
      std::vector<uint8_t> packed(w.size());
      const TensorView P = pack_x16(view_of(t, K, N, w), packed.data());
      ASSERT_EQ(P.layout, WeightLayout::X16);
      EXPECT_NE(packed, w);
      expect_rows_unpack_to_file_bytes(P, w, unpack_x16_row);
    }
}

TEST(RepackX16, RefusesShapesOutsideTheLayout) {
  std::vector<uint8_t> bytes(row_bytes(DType::Q4_K, 256) * 24);
  TensorView W = view_of(DType::Q4_K, 256, 24, bytes);  // 24 rows: not whole groups of 16
  EXPECT_FALSE(repack_x16_applies(W));
  EXPECT_THROW(pack_x16(W, bytes.data()), Error);
  W.ne = {256, 16};
  EXPECT_EQ(repack_x16_applies(W), x16_kernel_available(DType::Q4_K));  // only where its kernel is built
  EXPECT_EQ(repack_applies(W), x16_kernel_available(DType::Q4_K));
  for (DType t : {DType::F16, DType::BF16}) {  // not X16 types
    W.type = t;
    EXPECT_FALSE(repack_x16_applies(W)) << dtype_name(t);
    EXPECT_THROW(pack_x16(W, bytes.data()), Error) << dtype_name(t);
  }
  // The 32-element types have a kernel with AVX-512 VNNI alone, and are repacked only there.
  const bool vnni512 = std::string(dot_kernel_isa()) == "avx512-vnni";
  for (DType t : kX16Types) {
    if (!x16_block32_type(t)) continue;
    W.type = t;
    W.ne = {96, 16};
    EXPECT_EQ(x16_kernel_available(t), vnni512) << dtype_name(t);
    EXPECT_EQ(repack_x16_applies(W), vnni512) << dtype_name(t);
    W.ne = {96, 24};
    EXPECT_FALSE(repack_x16_applies(W)) << dtype_name(t);
  }
}

// The group kernel (SIMD where built, and the portable gather) against float64, every token count.
// Random bytes give every scale, min and quant its extremes (Q6_K's scales -128..127).
TEST(RepackX16, GroupKernelMatchesFloat64) {
  for (DType t : kX16Types)
    for (int64_t K : x16_lengths(t, {256, 2048}, {32, 288, 640})) {
      std::mt19937 rng(static_cast<unsigned>(K) * 11 + static_cast<unsigned>(t));
      expect_group_kernel_matches_float64(
          t, K, kGroupRowsX16, rng, [](const TensorView& v, uint8_t* dst) { return pack_x16(v, dst); },
          [&](const uint8_t* g, const Prepared& a, int rn, float* out) {
            dot_tile_x16(t, K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRowsX16);
          },
          [&](const uint8_t* g, const Prepared& a, int rn, float* out) {
            portable::dot_tile_x16(t, K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRowsX16);
          });
    }
  for (DType t : kX16Types)
    if (!x16_kernel_available(t)) std::cout << dtype_name(t) << ": no X16 kernel in this build, dot_tile_x16 is the portable gather\n";
}

// The int32 sums at their largest: every quant, scale and min at its extreme magnitude (Q6_K's
// scales -128, Q3_K's and IQ4_XS's -32, IQ4_XS's values 113, shifted 241 for AVX-512, and in a
// second pass -127, AVX2's largest |v|), against activations of all 127, all -127 and alternating
// signs. The kernel must give the float64 sums (no wrap). The 32-element types take every byte
// 0xFF (nibbles 15, fifth bits set: Q4_0's 16 u of the high nibbles 240, IQ4_NL's 113 + 128 = 241)
// and then 0x00 (Q8_0: 127, u = 255, and then -128), against Q8_1 activations of the same values.
TEST(RepackX16, LargestSumsDoNotWrap) {
  const int64_t K = 512;
  const auto act = [](int j, int64_t e) {  // token j's element e
    return j % 4 == 0 ? 127 : j % 4 == 1 ? -127 : j % 4 == 2 ? (e % 2 ? 127 : -127) : (e % (j + 1) ? -127 : 127);
  };
  for (DType t : kX16Types)
    for (int pass = 0; pass < (t == DType::IQ4_XS || x16_block32_type(t) ? 2 : 1); ++pass) {
      if (!x16_kernel_available(t)) continue;  // the portable gather: plain int sums
      const bool block32 = x16_block32_type(t);
      const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
      const uint8_t fill = t == DType::Q8_0 ? (pass == 1 ? 0x80 : 0x7F) : block32 && pass == 1 ? 0x00 : 0xFF;
      std::vector<uint8_t> w(row_bytes(t, K) * kGroupRowsX16, fill);
      for (size_t b = 0; b < w.size(); b += bb) {
        for (int off : fp16_fields(t)) {
          const uint16_t one = fp32_to_fp16(1.0f);
          std::memcpy(&w[b + static_cast<size_t>(off)], &one, 2);
        }
        if (t == DType::Q6_K) std::memset(&w[b + quant::kQ6K_SCALES], 0x80, 16);
        if (t == DType::Q3_K) std::memset(&w[b + quant::kQ3K_SCALES], 0x00, 12);
        if (t == DType::IQ4_XS) std::memset(&w[b + quant::kIQ4XS_SCALES_H], 0x00, 6);
        if (t == DType::IQ4_XS && pass == 1) std::memset(&w[b + quant::kIQ4XS_QS], 0x00, 128);  // nibbles 0: -127
      }
      std::vector<uint8_t> packed(w.size());
      const TensorView P = pack_x16(view_of(t, K, kGroupRowsX16, w), packed.data());
      Prepared a;
      if (block32) {  // Q8_1 blocks of d = 1 and quants +-127
        std::vector<float> x(static_cast<size_t>(kTileTokens * K));
        for (int j = 0; j < kTileTokens; ++j)
          for (int64_t e = 0; e < K; ++e) x[static_cast<size_t>(j * K + e)] = static_cast<float>(act(j, e));
        a = prepare(t, x, kTileTokens, K, P.layout);
      } else {
        a.row_bytes = act_row_bytes(ActFormat::Q8_K, K);
        a.bytes.assign(a.row_bytes * kTileTokens, 0);
        a.values.resize(static_cast<size_t>(kTileTokens * K));
        for (int j = 0; j < kTileTokens; ++j)
          for (int64_t b = 0; b < K / 256; ++b) {
            auto& blk = reinterpret_cast<ActBlockQ8_K*>(a.bytes.data() + j * a.row_bytes)[b];
            blk.d = 1.0f;
            for (int e = 0; e < 256; ++e) {
              const int v = act(j, 256 * b + e);
              blk.qs[e] = static_cast<int8_t>(v);
              a.values[static_cast<size_t>(j * K + 256 * b + e)] = static_cast<float>(v);
            }
            for (int g = 0; g < 16; ++g) {
              int sum = 0;
              for (int e = 0; e < 16; ++e) sum += blk.qs[16 * g + e];
              blk.bsums[g] = static_cast<int16_t>(sum);
            }
          }
      }
      std::vector<double> want, mag;
      reference(t, w, kGroupRowsX16, K, a, kTileTokens, &want, &mag);
      for (int rn : {1, kTileTokens}) {  // one token: the AVX2 decode kernels
        std::vector<float> got(kGroupRowsX16 * kTileTokens, NAN);
        dot_tile_x16(t, K, packed.data(), a.bytes.data(), a.row_bytes, rn, got.data(), kGroupRowsX16);
        expect_tile(got, want, mag, kGroupRowsX16, kGroupRowsX16, rn, std::string("extremes ") + dtype_name(t));
      }
    }
}

// The prompt kernel (each block unpacked once for all tokens) gives the tile kernel's results bit
// for bit, for token counts across and between tiles of 4.
TEST(RepackX16, PromptKernelEqualsTileKernel) {
  for (DType t : kX16Types) {
    const int64_t K = x16_block32_type(t) ? 608 : 768, n = 11;  // 608: 19 blocks, chunks of 8, 8 and 3
    std::mt19937 rng(static_cast<unsigned>(t) + 500);
    const auto w = random_rows(t, kGroupRowsX16, K, rng);
    std::vector<uint8_t> packed(w.size());
    const TensorView P = pack_x16(view_of(t, K, kGroupRowsX16, w), packed.data());
    const Prepared a = prepare(t, random_floats(n * K, rng), n, K, P.layout);
    for (int64_t tokens : {1, 4, 5, 11}) {
      std::vector<float> group(static_cast<size_t>(tokens * kGroupRowsX16), NAN), tiles(group);
      dot_group_x16(t, K, packed.data(), a.bytes.data(), a.row_bytes, tokens, group.data(), kGroupRowsX16);
      for (int64_t j = 0; j < tokens; j += kTileTokens)
        dot_tile_x16(t, K, packed.data(), a.bytes.data() + static_cast<size_t>(j) * a.row_bytes, a.row_bytes,
                     static_cast<int>(std::min<int64_t>(kTileTokens, tokens - j)), tiles.data() + j * kGroupRowsX16, kGroupRowsX16);
      for (size_t o = 0; o < group.size(); ++o)
        ASSERT_EQ(group[o], tiles[o]) << dtype_name(t) << " tokens " << tokens << " at " << o;
    }
  }
}

// matmul over X16 groups: ragged token counts, several chunks, 1 and 2 threads; a token's result
// does not depend on the other tokens of its tile (decode rounds as a batch does).
TEST(RepackX16, MatmulOverGroupsMatchesFloat64) {
  for (DType t : kX16Types) {
    const int64_t K = x16_block32_type(t) ? 576 : 512, N = 80;  // 2 threads' decode halves round up to 48 + 32 rows
    std::mt19937 rng(static_cast<unsigned>(t) + 400);
    const auto w = random_rows(t, N, K, rng);
    std::vector<uint8_t> packed(w.size());
    const TensorView P = pack_x16(view_of(t, K, N, w), packed.data());
    expect_matmul_matches_float64(P, w, {1, 2, 5, 11, 17, 33}, rng);
    const auto x = random_floats(11 * K, rng);
    std::vector<float> batch(static_cast<size_t>(11 * N)), one(static_cast<size_t>(N));
    ThreadPool pool(2);
    matmul(batch.data(), x.data(), 11, P, pool);
    for (int64_t j = 0; j < 11; ++j) {
      matmul(one.data(), x.data() + j * K, 1, P, pool);
      for (int64_t r = 0; r < N; ++r) ASSERT_EQ(one[static_cast<size_t>(r)], batch[static_cast<size_t>(j * N + r)]) << dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace slake
