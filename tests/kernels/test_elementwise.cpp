// Embedding, RMSNorm, RoPE, SwiGLU and the residual add against the CPU forward pass's own
// functions (src/cpu/ops.cpp, src/cpu/rope.cpp), on shapes that are not multiples of the block size.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "reference/moe_rows_ref.h"
#include "reference/residual_ref.h"
#include "slake/quant/dtype.h"
#include "slake/cpu/ops.h"
#include "slake/cpu/rope.h"

namespace slake::gpu::test {
namespace {

TensorView view_of(DType type, const void* data, int64_t row_len, int64_t rows) {
  TensorView v;
  v.type = type;
  v.ne = {row_len, rows};
  v.data = static_cast<const uint8_t*>(data);
  v.nbytes = row_bytes(type, row_len) * static_cast<size_t>(rows);
  return v;
}

// Tables are converted exactly (f16/bf16 -> f32), so the rows must match bit for bit.
TEST(KernelEmbedding, RowsOfF32F16Bf16TablesMatchTheCpuExactly) {
  const int vocab = 37, dim = 300;  // dim: not a multiple of the 256-thread block
  const std::vector<float> f = random_floats(static_cast<size_t>(vocab * dim), 1, -70000.0f, 70000.0f);
  std::vector<uint16_t> h(f.size()), b(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    // f16: a mix of normal values, subnormals (tiny scale), +-inf from the out-of-range ones.
    h[i] = fp32_to_fp16(i % 3 == 0 ? f[i] * 1e-9f : f[i]);
    b[i] = fp32_to_bf16(f[i]);
  }
  const std::vector<int32_t> tokens{0, 36, 5, 5, 17, 2, 33};
  DeviceBuffer<int32_t> d_tokens(tokens);
  struct Case {
    ElemType et;
    DType dt;
    const void* data;
    size_t bytes;
  };
  for (const Case& c : {Case{ElemType::F32, DType::F32, f.data(), f.size() * 4}, Case{ElemType::F16, DType::F16, h.data(), h.size() * 2},
                        Case{ElemType::BF16, DType::BF16, b.data(), b.size() * 2}}) {
    DeviceBuffer<uint8_t> table(c.bytes);
    copy_to_device(table.get(), c.data, c.bytes);
    DeviceBuffer<float> out(tokens.size() * dim);
    embedding(out.get(), table.get(), c.et, d_tokens.get(), static_cast<int>(tokens.size()), dim);
    const std::vector<float> got = out.download();
    const TensorView tv = view_of(c.dt, c.data, dim, vocab);
    std::vector<float> want(got.size());
    for (size_t t = 0; t < tokens.size(); ++t) embedding_row(want.data() + t * dim, tv, tokens[t]);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
          << dtype_name(c.dt) << " element " << i << ": " << got[i] << " vs " << want[i];
  }
  // Gemma's scaled embeddings: each value times the scale, one float product.
  const float scale = std::sqrt(640.0f);
  DeviceBuffer<uint8_t> table(f.size() * 4);
  copy_to_device(table.get(), f.data(), f.size() * 4);
  DeviceBuffer<float> out(tokens.size() * dim);
  embedding(out.get(), table.get(), ElemType::F32, d_tokens.get(), static_cast<int>(tokens.size()), dim, scale);
  const std::vector<float> got = out.download();
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int i = 0; i < dim; ++i)
      ASSERT_EQ(got[t * dim + static_cast<size_t>(i)], f[static_cast<size_t>(tokens[t]) * dim + static_cast<size_t>(i)] * scale);
}

TEST(KernelRmsnorm, MatchesTheCpuRmsnorm) {
  // fp32 block reduction against the CPU's double sum of squares: relative 1e-5.
  for (const int n : {1, 31, 288, 777}) {
    const int rows = 5;
    const std::vector<float> x = random_floats(static_cast<size_t>(rows * n), 2, -3.0f, 3.0f);
    const std::vector<float> w = random_floats(static_cast<size_t>(n), 3, 0.5f, 1.5f);
    DeviceBuffer<float> dx(x), dw(w), out(static_cast<size_t>(rows * n));
    rmsnorm(out.get(), dx.get(), dw.get(), rows, n, 1e-5f);
    std::vector<float> want(x.size());
    for (int r = 0; r < rows; ++r) slake::rmsnorm(want.data() + r * n, x.data() + r * n, view_of(DType::F32, w.data(), n, 1), n, 1e-5f);
    expect_close(out.download(), want, 1e-6, 1e-5, "rmsnorm n=" + std::to_string(n));
  }
}

// Half layout with LongRoPE's factor on cos and sin (Phi-3), adjacent without.
TEST(KernelRope, BothLayoutsWithLlama31ScalingMatchTheCpuRope) {
  for (const RopeLayout layout : {RopeLayout::Adjacent, RopeLayout::Half}) {
    ModelConfig cfg;
    cfg.head_dim = 72;  // 36 frequencies: not a multiple of a warp
    cfg.rope_theta = 500000.0f;
    cfg.rope_layout = layout;
    cfg.rope_freq_factors.resize(36);
    for (int i = 0; i < 36; ++i) cfg.rope_freq_factors[static_cast<size_t>(i)] = i < 12 ? 1.0f : (i < 24 ? 3.5f : 8.0f);
    if (layout == RopeLayout::Half) cfg.rope_attn_factor = 1.1902f;
    const Rope rope_cpu(cfg, 4096);
    const int n_heads = 3, n_tokens = 6;
    const int64_t stride = n_heads * 72 + 10;  // rows with padding: the kernel must honour the stride
    const std::vector<int32_t> pos{0, 1, 7, 4095, 131071, 77};
    const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens * stride), 4);
    DeviceBuffer<float> dx(x);
    DeviceBuffer<int32_t> dpos(pos);
    DeviceBuffer<double> dfreq(rope_cpu.inv_freq());
    rope(dx.get(), dpos.get(), n_tokens, stride, n_heads, 72, dfreq.get(), layout == RopeLayout::Half, rope_cpu.mscale());
    std::vector<float> want = x;
    for (int t = 0; t < n_tokens; ++t) rope_cpu.apply(want.data() + t * stride, n_heads, pos[static_cast<size_t>(t)]);
    // Same double angles, same fp32 rotation: equal up to the last bit of sin/cos.
    expect_close(dx.download(), want, 1e-6, 1e-6, layout == RopeLayout::Half ? "rope half" : "rope adjacent");
  }
}

TEST(KernelSwiglu, MatchesTheCpuSwiglu) {
  const int64_t n = 1000 * 3 + 7;
  const std::vector<float> g = random_floats(static_cast<size_t>(n), 5, -20.0f, 20.0f), u = random_floats(static_cast<size_t>(n), 6);
  DeviceBuffer<float> dg(g), du(u), out(static_cast<size_t>(n));
  swiglu(out.get(), dg.get(), du.get(), n);
  std::vector<float> want(static_cast<size_t>(n));
  slake::swiglu(want.data(), g.data(), u.data(), n);
  expect_close(out.download(), want, 1e-7, 1e-6, "swiglu");
  // The CPU's vector exp and its scalar tail against float64 SiLU(g) * u.
  std::vector<double> exact(static_cast<size_t>(n));
  for (size_t i = 0; i < exact.size(); ++i) exact[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
  expect_close(want, exact, 1e-7, 1e-6, "cpu swiglu against float64");
}

TEST(KernelGeglu, MatchesTheCpuGegluAndTheTanhGelu) {
  const int64_t n = 1000 * 3 + 7;
  const std::vector<float> g = random_floats(static_cast<size_t>(n), 7, -12.0f, 12.0f), u = random_floats(static_cast<size_t>(n), 8);
  DeviceBuffer<float> dg(g), du(u), out(static_cast<size_t>(n));
  geglu(out.get(), dg.get(), du.get(), n);
  std::vector<float> want(static_cast<size_t>(n));
  slake::geglu(want.data(), g.data(), u.data(), n);
  expect_close(out.download(), want, 1e-6, 1e-6, "geglu");
  // The CPU reference against GELU's tanh form in double precision, and PyTorch's
  // gelu(1, approximate='tanh') = 0.8411919906 (torch 2.x, float64).
  std::vector<double> exact(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[static_cast<size_t>(i)];
    exact[static_cast<size_t>(i)] = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(want[static_cast<size_t>(i)], exact[static_cast<size_t>(i)], 1e-5 + 1e-5 * std::fabs(exact[static_cast<size_t>(i)])) << i;
  const float one = 1.0f, unit = 1.0f;
  float y = 0;
  slake::geglu(&y, &one, &unit, 1);
  EXPECT_NEAR(y, 0.8411919906, 1e-6);
}

TEST(KernelResidual, AddsInPlace) {
  const int64_t n = 513;
  std::vector<float> x = random_floats(static_cast<size_t>(n), 7);
  const std::vector<float> y = random_floats(static_cast<size_t>(n), 8);
  DeviceBuffer<float> dx(x), dy(y);
  residual_add(dx.get(), dy.get(), n);
  reference::residual_add(x.data(), y.data(), n);
  EXPECT_EQ(dx.download(), x);
}

// A bias on every row, against the CPU path's add_bias_rows (the Qwen2 layer's Q/K/V biases).
TEST(KernelResidual, BiasAddsToEveryRow) {
  const int rows = 7;
  const int64_t width = 96;
  std::vector<float> x = random_floats(static_cast<size_t>(rows * width), 9);
  std::vector<float> b = random_floats(static_cast<size_t>(width), 10);
  DeviceBuffer<float> dx(x), db(b);
  bias_add(dx.get(), db.get(), rows, width);
  TensorView bv;
  bv.type = DType::F32;
  bv.ne = {width};
  bv.data = reinterpret_cast<const uint8_t*>(b.data());
  bv.nbytes = b.size() * sizeof(float);
  slake::add_bias_rows(x.data(), bv, rows, width);
  EXPECT_EQ(dx.download(), x);
}

// One expert's rows of a mixture: gathered out of order from a block of 9 rows (width not a
// multiple of the block), then added back in their weights; rows outside the list stay untouched.
TEST(KernelMoeRows, GatherAndWeightedScatterMatchTheReference) {
  const int rows = 9, m = 4;
  const int64_t width = 131;
  const std::vector<float> in = random_floats(static_cast<size_t>(rows * width), 11);
  const std::vector<int32_t> idx{7, 0, 5, 2};
  const std::vector<float> w{0.25f, 0.5f, 0.125f, 1.0f};
  DeviceBuffer<float> din(in), dout(static_cast<size_t>(m * width));
  DeviceBuffer<int32_t> didx(idx);
  gather_rows(dout.get(), din.get(), didx.get(), m, width);
  std::vector<float> want(static_cast<size_t>(m * width));
  reference::gather_rows(want.data(), in.data(), idx.data(), m, width);
  EXPECT_EQ(dout.download(), want);
  EXPECT_EQ(want[static_cast<size_t>(width)], in[0]);  // row 1 of the block is input row 0

  std::vector<float> acc = random_floats(static_cast<size_t>(rows * width), 12);
  const std::vector<float> y = random_floats(static_cast<size_t>(m * width), 13);
  DeviceBuffer<float> dacc(acc), dy(y), dw(w);
  scatter_add_rows(dacc.get(), dy.get(), didx.get(), dw.get(), m, width);
  const std::vector<float> before = acc;
  reference::scatter_add_rows(acc.data(), y.data(), idx.data(), w.data(), m, width);
  EXPECT_EQ(dacc.download(), acc);
  EXPECT_EQ(acc[static_cast<size_t>(width)], before[static_cast<size_t>(width)]);  // row 1 is in no list
  EXPECT_EQ(acc[0], before[0] + 0.5f * y[static_cast<size_t>(width)]);
}

}  // namespace
}  // namespace slake::gpu::test
