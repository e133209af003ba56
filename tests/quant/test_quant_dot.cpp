// The dot-product kernels (SIMD and portable) and matmul against float64 sums over the
// dequantised weights and the dequantised (prepared) activations, and the activation quantisation
// against the fp32 values it stands for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "slake/quant/dtype.h"
#include "slake/error.h"
#include "slake/cpu/ops.h"
#include "slake/quant/quant_blocks.h"
#include "slake/quant/quant_dot.h"
#include "slake/quant/weight_pack.h"

namespace slake {
namespace {

// Byte offsets of the fp16 fields of a block of type t (ggml's block_* layouts).
std::vector<int> fp16_fields(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};  // d, m / dmin
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {0};  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first
  }
}

// Random rows of type t: random bytes, with every fp16 scale field set to a modest random value
// (random bits there could be Inf or NaN). Any other bit pattern is a valid block.
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t K, std::mt19937& rng) {
  const size_t rb = row_bytes(t, K);
  std::vector<uint8_t> data(static_cast<size_t>(rows) * rb);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), value(-2.0f, 2.0f);
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  const int64_t n = static_cast<int64_t>(data.size());
  switch (t) {
    case DType::F32:
      for (int64_t i = 0; i < n; i += 4) {
        const float f = value(rng);
        std::memcpy(&data[static_cast<size_t>(i)], &f, 4);
      }
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; i += 2) put16(&data[static_cast<size_t>(i)], fp32_to_fp16(value(rng)));
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; i += 2) put16(&data[static_cast<size_t>(i)], fp32_to_bf16(value(rng)));
      break;
    default: {  // quantised: the fp16 fields (scales, mins) of each block
      const int64_t bb = dtype_info(t).block_bytes;
      for (int64_t i = 0; i < n; i += bb)
        for (int off : fp16_fields(t)) put16(&data[static_cast<size_t>(i + off)], fp32_to_fp16(scale(rng)));
    }
  }
  return data;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  return x;
}

struct Prepared {
  std::vector<uint8_t> bytes;  // rows of act_row_bytes
  std::vector<float> values;   // the same rows, dequantised
  size_t row_bytes = 0;
};

Prepared prepare(DType w, const std::vector<float>& x, int64_t rows, int64_t K) {
  const ActFormat f = act_format(w);
  Prepared p;
  p.row_bytes = act_row_bytes(f, K);
  p.bytes.resize(static_cast<size_t>(rows) * p.row_bytes);
  p.values.resize(static_cast<size_t>(rows * K));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_act_row(f, x.data() + r * K, p.bytes.data() + r * p.row_bytes, K);
    dequantize_act_row(f, p.bytes.data() + r * p.row_bytes, p.values.data() + r * K, K);
  }
  return p;
}

// float64 sums of dequantised weights times dequantised activations, and the sums of magnitudes
// that bound the fp32 rounding.
void reference(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t K, const Prepared& a, int64_t tokens,
               std::vector<double>* dot, std::vector<double>* mag) {
  std::vector<float> wf(static_cast<size_t>(K));
  dot->assign(static_cast<size_t>(rows * tokens), 0.0);
  mag->assign(static_cast<size_t>(rows * tokens), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t, w.data() + static_cast<size_t>(r) * row_bytes(t, K), wf.data(), K);
    for (int64_t j = 0; j < tokens; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(wf[static_cast<size_t>(k)]) * a.values[static_cast<size_t>(j * K + k)];
        (*dot)[static_cast<size_t>(j * rows + r)] += p;
        (*mag)[static_cast<size_t>(j * rows + r)] += std::abs(p);
      }
  }
}

// A matrix view of w's bytes (N rows of K elements of type t).
TensorView view_of(DType t, int64_t K, int64_t N, const std::vector<uint8_t>& w) {
  TensorView W;
  W.name = "w";
  W.type = t;
  W.ne = {K, N};
  W.data = w.data();
  W.nbytes = w.size();
  return W;
}

// matmul over W (whose rows are `rows`, in the file's layout, for the reference) equals the
// float64 sums, for each token count, with 1 and 2 threads.
void expect_matmul_matches_float64(const TensorView& W, const std::vector<uint8_t>& rows, std::initializer_list<int64_t> token_counts,
                                   std::mt19937& rng) {
  const DType t = W.type;
  const int64_t K = W.row_len(), N = W.n_rows();
  for (int64_t tokens : token_counts) {
    const auto x = random_floats(tokens * K, rng);
    const Prepared a = prepare(t, x, tokens, K);
    std::vector<double> want, mag;
    reference(t, rows, N, K, a, tokens, &want, &mag);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      std::vector<float> got(static_cast<size_t>(tokens * N));
      matmul(got.data(), x.data(), tokens, W, pool);
      for (size_t o = 0; o < got.size(); ++o)
        ASSERT_NEAR(got[o], want[o], 1e-5 * mag[o] + 1e-30)
            << dtype_name(t) << " tokens " << tokens << " threads " << threads << " at " << o;
    }
  }
}

// A tile of rows x kTileTokens outputs (row stride `rows`) of which the kernel wrote i < rm,
// j < rn: those match the float64 sums within the fp32 accumulation bound (relative to the sum
// of magnitudes over K terms), the rest are untouched (NaN).
void expect_tile(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag, int rows,
                 int rm, int rn, const std::string& what) {
  for (int j = 0; j < kTileTokens; ++j)
    for (int i = 0; i < rows; ++i) {
      const size_t o = static_cast<size_t>(j * rows + i);
      if (i >= rm || j >= rn) {
        EXPECT_TRUE(std::isnan(got[o])) << what << " " << rm << "x" << rn << " wrote outside the tile at " << i << "," << j;
        continue;
      }
      EXPECT_NEAR(got[o], want[o], 1e-5 * mag[o] + 1e-30) << what << " " << rm << "x" << rn << " at " << i << "," << j;
    }
}

// Every row of the repacked view P, unpacked by unpack(P, r, dst) and through row_in_file_layout,
// is the file's row (rows: the file's bytes).
template <class Unpack>
void expect_rows_unpack_to_file_bytes(const TensorView& P, const std::vector<uint8_t>& rows, Unpack unpack) {
  const size_t rb = row_bytes(P.type, P.row_len());
  std::vector<uint8_t> row(rb), scratch;
  for (int64_t r = 0; r < P.n_rows(); ++r) {
    unpack(P, r, row.data());
    ASSERT_EQ(0, std::memcmp(row.data(), rows.data() + static_cast<size_t>(r) * rb, rb))
        << dtype_name(P.type) << " K " << P.row_len() << " row " << r;
    ASSERT_EQ(0, std::memcmp(row_in_file_layout(P, r, scratch), row.data(), rb));
  }
}

// A group layout's kernel (SIMD where built) and its portable gather against float64, every token
// count: `pack` writes `rows` random rows of type t in the layout, `simd` and `port` run a tile
// (group, prepared activations, rn, out with row stride `rows`).
template <class Pack, class Tile, class Gather>
void expect_group_kernel_matches_float64(DType t, int64_t K, int rows, std::mt19937& rng, Pack pack, Tile simd, Gather port) {
  const auto w = random_rows(t, rows, K, rng);
  std::vector<uint8_t> packed(w.size());
  pack(view_of(t, K, rows, w), packed.data());
  const auto x = random_floats(kTileTokens * K, rng);
  const Prepared a = prepare(t, x, kTileTokens, K);
  std::vector<double> want, mag;
  reference(t, w, rows, K, a, kTileTokens, &want, &mag);
  const std::string what = std::string(dtype_name(t)) + " K " + std::to_string(K);
  for (int rn = 1; rn <= kTileTokens; ++rn) {
    std::vector<float> got(static_cast<size_t>(rows) * kTileTokens, NAN), gathered(got);
    simd(packed.data(), a, rn, got.data());
    port(packed.data(), a, rn, gathered.data());
    expect_tile(got, want, mag, rows, rows, rn, "simd " + what);
    expect_tile(gathered, want, mag, rows, rows, rn, "portable " + what);
  }
}

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
      float out = NAN, port = NAN;
      const uint8_t* w = t == DType::IQ4_NL ? nl.data() : xs.data();
      dot_tile(t, K, w, row_bytes(t, K), 1, a.data(), a.size(), 1, &out, 1);
      portable::dot_tile(t, K, w, row_bytes(t, K), 1, a.data(), a.size(), 1, &port, 1);
      EXPECT_EQ(out, static_cast<float>(want)) << dtype_name(t);
      EXPECT_EQ(port, static_cast<float>(want)) << dtype_name(t);
    }
  }
}

// The largest K-quant products: every quant and scale bit set (Q6_K's quants at 63, Q5_K's at 31,
// Q6_K's int8 scales at -1), d and dmin 1, against activations of +-127. The int16 pair sums of
// the SIMD tiles must not saturate; every term is an integer, so the sums are exact in fp32 and
// equal the float64 dot product over the dequantised weights.
TEST(DotTile, KQuantExtremesDoNotSaturate) {
  constexpr int64_t K = 512;
  struct Layout { DType t; std::vector<int> fp16_one; };  // offsets of d (and dmin) in a block
  const Layout layouts[] = {{DType::Q2_K, {80, 82}}, {DType::Q3_K, {108}}, {DType::Q4_K, {0, 2}},
                            {DType::Q5_K, {0, 2}}, {DType::Q6_K, {208}}};
  for (const Layout& l : layouts) {
    const size_t bb = row_bytes(l.t, 256);
    std::vector<uint8_t> w(2 * bb, 0xFF);
    for (size_t b = 0; b < 2; ++b)
      for (int off : l.fp16_one) w[b * bb + off] = 0x00, w[b * bb + off + 1] = 0x3C;
    std::vector<float> deq(K);
    dequantize_row(l.t, w.data(), deq.data(), K);
    for (int sign : {1, -1}) {
      std::vector<float> x(static_cast<size_t>(K), 127.0f * static_cast<float>(sign));
      double want = 0.0;
      for (int64_t k = 0; k < K; ++k) want += static_cast<double>(deq[k]) * x[k];
      std::vector<uint8_t> a(act_row_bytes(act_format(l.t), K));
      quantize_act_row(act_format(l.t), x.data(), a.data(), K);
      for (int rn = 1; rn <= kTileTokens; ++rn) {  // the same activation row in every token slot
        std::vector<uint8_t> acts(a.size() * rn);
        for (int j = 0; j < rn; ++j) std::memcpy(acts.data() + a.size() * j, a.data(), a.size());
        std::vector<float> out(rn, NAN);
        dot_tile(l.t, K, w.data(), row_bytes(l.t, K), 1, acts.data(), a.size(), rn, out.data(), 1);
        for (int j = 0; j < rn; ++j) EXPECT_EQ(out[j], static_cast<float>(want)) << dtype_name(l.t) << " rn " << rn;
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
          t, K, kGroupRows, rng, [](const TensorView& v, uint8_t* dst) { pack_x4(v, dst); },
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
        DType::Q4_0, K, kGroupRowsX8, rng, [](const TensorView& v, uint8_t* dst) { pack_x8(v, dst); },
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

// The X16 layout (the K-quants and IQ4_XS in transposed groups of 16 rows): every row unpacks to the file's
// bytes (a re-encoding of every field, so any lost bit shows), through row_in_file_layout too.
constexpr DType kX16Types[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};

TEST(RepackX16, EveryRowUnpacksToTheFileBytes) {
  for (DType t : kX16Types)
    for (int64_t K : {256, 768}) {
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
  EXPECT_EQ(repack_x16_applies(W), x16_kernel_available());  // only where its kernel is built
  EXPECT_EQ(repack_applies(W), x16_kernel_available());
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::IQ4_NL, DType::F16}) {  // not 256-element K-quants
    W.type = t;
    EXPECT_FALSE(repack_x16_applies(W)) << dtype_name(t);
    EXPECT_THROW(pack_x16(W, bytes.data()), Error) << dtype_name(t);
  }
}

// The group kernel (SIMD where built, and the portable gather) against float64, every token count.
// Random bytes give every scale, min and quant its extremes (Q6_K's scales -128..127).
TEST(RepackX16, GroupKernelMatchesFloat64) {
  if (!x16_kernel_available()) std::cout << "no X16 kernel in this build: dot_tile_x16 is the portable gather\n";
  for (DType t : kX16Types)
    for (int64_t K : {256, 2048}) {
      std::mt19937 rng(static_cast<unsigned>(K) * 11 + static_cast<unsigned>(t));
      expect_group_kernel_matches_float64(
          t, K, kGroupRowsX16, rng, [](const TensorView& v, uint8_t* dst) { pack_x16(v, dst); },
          [&](const uint8_t* g, const Prepared& a, int rn, float* out) {
            dot_tile_x16(t, K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRowsX16);
          },
          [&](const uint8_t* g, const Prepared& a, int rn, float* out) {
            portable::dot_tile_x16(t, K, g, a.bytes.data(), a.row_bytes, rn, out, kGroupRowsX16);
          });
    }
}

// The int32 sums at their largest: every quant, scale and min at its extreme magnitude (Q6_K's
// scales -128, Q3_K's and IQ4_XS's -32, IQ4_XS's values 113, shifted 241), against activations of
// all 127, all -127 and alternating signs. The kernel must give the float64 sums (no wrap).
TEST(RepackX16, LargestSumsDoNotWrap) {
  if (!x16_kernel_available()) GTEST_SKIP() << "no X16 kernel in this build (AVX-512 VNNI)";
  const int64_t K = 512;
  for (DType t : kX16Types) {
    const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
    std::vector<uint8_t> w(row_bytes(t, K) * kGroupRowsX16, 0xFF);
    for (size_t b = 0; b < w.size(); b += bb) {
      for (int off : fp16_fields(t)) {
        const uint16_t one = fp32_to_fp16(1.0f);
        std::memcpy(&w[b + static_cast<size_t>(off)], &one, 2);
      }
      if (t == DType::Q6_K) std::memset(&w[b + quant::kQ6K_SCALES], 0x80, 16);
      if (t == DType::Q3_K) std::memset(&w[b + quant::kQ3K_SCALES], 0x00, 12);
      if (t == DType::IQ4_XS) std::memset(&w[b + quant::kIQ4XS_SCALES_H], 0x00, 6);
    }
    std::vector<uint8_t> packed(w.size());
    pack_x16(view_of(t, K, kGroupRowsX16, w), packed.data());
    Prepared a;
    a.row_bytes = act_row_bytes(ActFormat::Q8_K, K);
    a.bytes.assign(a.row_bytes * kTileTokens, 0);
    a.values.resize(static_cast<size_t>(kTileTokens * K));
    for (int j = 0; j < kTileTokens; ++j)
      for (int64_t b = 0; b < K / 256; ++b) {
        auto& blk = reinterpret_cast<ActBlockQ8_K*>(a.bytes.data() + j * a.row_bytes)[b];
        blk.d = 1.0f;
        for (int e = 0; e < 256; ++e) {
          const int v = j % 4 == 0 ? 127 : j % 4 == 1 ? -127 : j % 4 == 2 ? (e % 2 ? 127 : -127) : (e % (j + 1) ? -127 : 127);
          blk.qs[e] = static_cast<int8_t>(v);
          a.values[static_cast<size_t>(j * K + 256 * b + e)] = static_cast<float>(v);
        }
        for (int g = 0; g < 16; ++g) {
          int sum = 0;
          for (int e = 0; e < 16; ++e) sum += blk.qs[16 * g + e];
          blk.bsums[g] = static_cast<int16_t>(sum);
        }
      }
    std::vector<double> want, mag;
    reference(t, w, kGroupRowsX16, K, a, kTileTokens, &want, &mag);
    std::vector<float> got(kGroupRowsX16 * kTileTokens, NAN);
    dot_tile_x16(t, K, packed.data(), a.bytes.data(), a.row_bytes, kTileTokens, got.data(), kGroupRowsX16);
    expect_tile(got, want, mag, kGroupRowsX16, kGroupRowsX16, kTileTokens, std::string("extremes ") + dtype_name(t));
  }
}

// The prompt kernel (each block unpacked once for all tokens) gives the tile kernel's results bit
// for bit, for token counts across and between tiles of 4.
TEST(RepackX16, PromptKernelEqualsTileKernel) {
  for (DType t : kX16Types) {
    const int64_t K = 768, n = 11;
    std::mt19937 rng(static_cast<unsigned>(t) + 500);
    const auto w = random_rows(t, kGroupRowsX16, K, rng);
    std::vector<uint8_t> packed(w.size());
    pack_x16(view_of(t, K, kGroupRowsX16, w), packed.data());
    const Prepared a = prepare(t, random_floats(n * K, rng), n, K);
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
    const int64_t K = 512, N = 80;  // 2 threads' decode halves round up to 48 + 32 rows
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
