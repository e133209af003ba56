// Helpers of the quantised-product tests (tests/quant, tests/cpu/test_ops.cpp): random rows of
// any weight type, activations prepared as the kernels take them, the float64 reference sums, and
// the checks of a tile, a group kernel and matmul against them.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "slake/cpu/ops.h"
#include "slake/cpu/thread_pool.h"
#include "slake/quant/dtype.h"
#include "slake/quant/quant_blocks.h"
#include "slake/quant/quant_dot.h"
#include "slake/quant/weight_pack.h"

namespace slake::test {

using quant::fp16_fields;  // the fp16 fields of a block of type t

// Random rows of type t: random bytes, with every fp16 scale field set to a modest random value
// (random bits there could be Inf or NaN). Any other bit pattern is a valid block.
inline std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t K, std::mt19937& rng) {
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

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
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

// `layout`: the weights' (act_format).
inline Prepared prepare(DType w, const std::vector<float>& x, int64_t rows, int64_t K, WeightLayout layout = WeightLayout::Rows) {
  const ActFormat f = act_format(w, layout);
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
inline void reference(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t K, const Prepared& a, int64_t tokens,
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
inline TensorView view_of(DType t, int64_t K, int64_t N, const std::vector<uint8_t>& w) {
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
inline void expect_matmul_matches_float64(const TensorView& W, const std::vector<uint8_t>& rows, std::initializer_list<int64_t> token_counts,
                                   std::mt19937& rng) {
  const DType t = W.type;
  const int64_t K = W.row_len(), N = W.n_rows();
  for (int64_t tokens : token_counts) {
    const auto x = random_floats(tokens * K, rng);
    const Prepared a = prepare(t, x, tokens, K, W.layout);
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
inline void expect_tile(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag, int rows,
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
// count: `pack` writes `rows` random rows of type t in the layout and returns its view, `simd` and
// `port` run a tile (group, prepared activations, rn, out with row stride `rows`).
template <class Pack, class Tile, class Gather>
void expect_group_kernel_matches_float64(DType t, int64_t K, int rows, std::mt19937& rng, Pack pack, Tile simd, Gather port) {
  const auto w = random_rows(t, rows, K, rng);
  std::vector<uint8_t> packed(w.size());
  const TensorView P = pack(view_of(t, K, rows, w), packed.data());
  const auto x = random_floats(kTileTokens * K, rng);
  const Prepared a = prepare(t, x, kTileTokens, K, P.layout);
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

}  // namespace slake::test
