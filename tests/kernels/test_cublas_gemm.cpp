// The cuBLAS wrapper (GPU only): row-major GEMM in every transpose combination and input type
// against a float64 product, ragged sizes and padded leading dimensions.
#include <gtest/gtest.h>

#include "cublas_gemm.h"
#include "kernel_test_util.h"
#include "kv_device.h"
#include "slake/quant/dtype.h"

namespace slake::gpu::test {
namespace {

// A stored [rows][ld]; element (r, c) of op(A) reads the stored (c, r) when transposed.
double at(const std::vector<float>& x, int ld, bool trans, int r, int c) {
  return trans ? x[static_cast<size_t>(c) * ld + r] : x[static_cast<size_t>(r) * ld + c];
}

TEST(CublasGemm, RowMajorProductsInEveryLayoutAndType) {
  const int m = 37, n = 19, k = 70;
  for (const ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
        const int a_rows = ta ? k : m, b_rows = tb ? n : k;
        std::vector<float> a = random_floats(static_cast<size_t>(a_rows * lda), 11), b = random_floats(static_cast<size_t>(b_rows * ldb), 12);
        std::vector<uint16_t> a16(a.size()), b16(b.size());
        // Round the inputs to the type first, so the reference sees exactly what the GPU reads.
        for (size_t i = 0; i < a.size(); ++i) {
          a16[i] = type == ElemType::F16 ? fp32_to_fp16(a[i]) : fp32_to_bf16(a[i]);
          if (type != ElemType::F32) a[i] = type == ElemType::F16 ? fp16_to_fp32(a16[i]) : bf16_to_fp32(a16[i]);
        }
        for (size_t i = 0; i < b.size(); ++i) {
          b16[i] = type == ElemType::F16 ? fp32_to_fp16(b[i]) : fp32_to_bf16(b[i]);
          if (type != ElemType::F32) b[i] = type == ElemType::F16 ? fp16_to_fp32(b16[i]) : bf16_to_fp32(b16[i]);
        }
        DeviceBuffer<float> da(a), db(b);
        DeviceBuffer<uint16_t> da16(a16), db16(b16);
        std::vector<float> c0 = random_floats(static_cast<size_t>(m * ldc), 13);
        DeviceBuffer<float> dc(c0);
        const bool f32 = type == ElemType::F32;
        Blas blas;
        gemm_rowmajor(blas, m, n, k, 0.5f, GemmOperand{f32 ? static_cast<const void*>(da.get()) : da16.get(), type, lda, ta},
                      GemmOperand{f32 ? static_cast<const void*>(db.get()) : db16.get(), type, ldb, tb}, 2.0f, dc.get(), ldc);
        std::vector<double> want(c0.begin(), c0.end());
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int t = 0; t < k; ++t) s += at(a, lda, ta, i, t) * at(b, ldb, tb, t, j);
            want[static_cast<size_t>(i) * ldc + j] = 0.5 * s + 2.0 * c0[static_cast<size_t>(i) * ldc + j];
          }
        expect_close(dc.download(), want, 1e-4, 1e-4,
                     "type " + std::to_string(static_cast<int>(type)) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb));
      }
}

TEST(CublasGemm, PrefillAbsorptionMatchesTheLinearState) {
  const int n_kv = 2, d = 40, n = 77;
  KvCache cache(1, n_kv, d, n);  // f32 rows: what absorb_gemm reads
  for (int t = 0; t < n; ++t) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_kv) * d, 200 + 2 * t), v = random_floats(static_cast<size_t>(n_kv) * d, 201 + 2 * t);
    cache.append(0, k.data(), v.data(), t);
  }
  for (int g = 0; g < n_kv; ++g) cache.head(0, g).lin = LinearState(d);
  DeviceKvLayer dev(cache, 0, n);
  const std::vector<int32_t> count{77, 30};
  DeviceBuffer<int32_t> dcount(count);
  std::vector<int32_t> rows(static_cast<size_t>(n_kv) * n);  // rows 0, 1, ... of each head
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(i % static_cast<size_t>(n));
  DeviceBuffer<int32_t> drows(rows);
  Blas blas;
  const float* k = reinterpret_cast<const float*>(dev.k.get());  // an f32 cache
  const float* v = reinterpret_cast<const float*>(dev.v.get());
  for (int g = 0; g < n_kv; ++g)
    absorb_gemm(blas, dev.M.get() + static_cast<size_t>(g) * d * d, k + static_cast<size_t>(g) * n * d, v + static_cast<size_t>(g) * n * d,
                count[static_cast<size_t>(g)], d, d);
  linear_state_sums(dev.lin(), dev.view(), drows.get(), n, dcount.get());
  std::vector<float> want_m, want_n;
  for (int g = 0; g < n_kv; ++g) {
    KvHead& kh = cache.head(0, g);
    kh.lin.absorb_batch(kh.key(0, d), kh.value(0, d), count[static_cast<size_t>(g)], static_cast<size_t>(d));
    want_m.insert(want_m.end(), kh.lin.M.begin(), kh.lin.M.end());
    want_n.push_back(kh.lin.n);
  }
  expect_close(dev.M.download(), want_m, 1e-5, 1e-5, "M");
  expect_close(dev.lin_n.download(), want_n, 0, 0, "n");
}

}  // namespace
}  // namespace slake::gpu::test
