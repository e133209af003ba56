// Float weights at prompt sizes: the dot-product tiles of quant_dot_simd.cpp load one activation
// vector per weight vector and end in horizontal sums, which holds them near a third of the
// FMA peak. Here a chunk of up to 32 weight rows is converted once into a k-major fp32 panel
// (panel[k][32]) and every token meets it as an outer product: per k, the panel's two 16-row
// vectors times the token's activation broadcast, into 2 x RN accumulators that are already the
// outputs of 32 rows (no horizontal sums). K goes in blocks of kPanelK so the panel stays in L2.
// AVX-512 holds a tile of 32 rows x 12 tokens in 24 registers; AVX2, with 16 registers of 8
// floats, sweeps the same 12-token tile as four blocks of 16 rows x 6 tokens (12 accumulators).
#include "matmul_panel.h"

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports as
// uninitialised (a false positive of the compiler's own headers; quant_dot_simd.cpp does the same).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstring>

#include "slake/error.h"

namespace slake {

namespace {
// Tokens per activation tile. AVX-512: 24 accumulators + 2 panel vectors + the broadcast, 27 of
// 32 registers. AVX2: two blocks of 6 tokens, each 12 accumulators + 2 + 1 of 16.
[[maybe_unused]] constexpr int kTileTokens = 12;

// Columns [k, kn) of panel rows [r0, r0 + n): the ragged end that the vector transposes leave.
[[maybe_unused]] void fill_panel_ragged(DType t, const uint8_t* w, size_t ws, int rows, int64_t k0, int64_t k, int64_t kn,
                                        int r0, int n, float* panel) {
  const size_t esz = t == DType::F32 ? 4 : 2;
  for (; k < kn; ++k)
    for (int i = 0; i < n; ++i) {
      float f = 0.0f;
      if (r0 + i < rows) dequantize_row(t, w + static_cast<size_t>(r0 + i) * ws + static_cast<size_t>(k0 + k) * esz, &f, 1);
      panel[k * kPanelRows + r0 + i] = f;
    }
}
}  // namespace

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

namespace {

// Weight rows [0, rows) x columns [k0, k0 + kn) into panel[k * kPanelRows + r] as fp32, 16 rows x
// 16 columns at a time through a register transpose; rows past `rows` are zero.
__m512 load16(DType t, const uint8_t* row, int64_t k) {
  if (t == DType::F32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
  if (t == DType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + 2 + h]);
      r[i + h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 + h] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  // r[4q + s] now holds, in each 128-bit lane L, rows 4q..4q+3 at column 4L + o(s), o = (0, 2,
  // 1, 3): column 4L + o gathers lane L of the four quads.
  constexpr int o_of[4] = {0, 2, 1, 3};
  for (int s = 0; s < 4; ++s) {
    const int o = o_of[s];
    const __m512 a = r[s], b = r[4 + s], c = r[8 + s], d = r[12 + s];
    const __m512 ab_lo = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), ab_hi = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 cd_lo = _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)), cd_hi = _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2));
    t[o] = _mm512_shuffle_f32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));       // lane 0 of each
    t[4 + o] = _mm512_shuffle_f32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));   // lane 1
    t[8 + o] = _mm512_shuffle_f32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));   // lane 2
    t[12 + o] = _mm512_shuffle_f32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));  // lane 3
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

void fill_panel(DType t, const uint8_t* w, size_t ws, int rows, int64_t k0, int64_t kn, float* panel) {
  for (int r0 = 0; r0 < kPanelRows; r0 += 16) {
    int64_t k = 0;
    for (; k + 16 <= kn; k += 16) {
      __m512 v[16];
      for (int i = 0; i < 16; ++i)
        v[i] = r0 + i < rows ? load16(t, w + static_cast<size_t>(r0 + i) * ws, k0 + k) : _mm512_setzero_ps();
      transpose16(v);
      for (int i = 0; i < 16; ++i) _mm512_store_ps(panel + (k + i) * kPanelRows + r0, v[i]);
    }
    fill_panel_ragged(t, w, ws, rows, k0, k, kn, r0, 16, panel);
  }
}

// Rows [0, 32) of RN tokens over the panel's kn columns; `add` sums into out.
template <int RN>
void panel_tile(int64_t kn, const float* panel, const float* a, int rows, float* out, int64_t os, bool add) {
  __m512 lo[RN], hi[RN];
  for (int j = 0; j < RN; ++j) lo[j] = hi[j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kn; ++k, a += RN) {
    const __m512 w0 = _mm512_load_ps(panel + k * kPanelRows), w1 = _mm512_load_ps(panel + k * kPanelRows + 16);
    for (int j = 0; j < RN; ++j) {
      const __m512 x = _mm512_set1_ps(a[j]);
      lo[j] = _mm512_fmadd_ps(w0, x, lo[j]);
      hi[j] = _mm512_fmadd_ps(w1, x, hi[j]);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>(rows >= 16 ? 0xFFFF : (1u << rows) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(rows >= 32 ? 0xFFFF : rows <= 16 ? 0 : (1u << (rows - 16)) - 1);
  for (int j = 0; j < RN; ++j) {
    float* o = out + j * os;
    if (add) {
      lo[j] = _mm512_add_ps(lo[j], _mm512_maskz_loadu_ps(m0, o));
      hi[j] = _mm512_add_ps(hi[j], _mm512_maskz_loadu_ps(m1, o + 16));
    }
    _mm512_mask_storeu_ps(o, m0, lo[j]);
    _mm512_mask_storeu_ps(o + 16, m1, hi[j]);
  }
}

}  // namespace

#define SLAKE_PANEL 1

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

namespace {

__m256 load8(DType t, const uint8_t* row, int64_t k) {
  if (t == DType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
  if (t == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // s[i] (i < 4) holds column i of rows 0-3 and column i + 4 of them in its upper half; s[4 + i]
  // the same of rows 4-7.
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x31);
  }
}

// As the AVX-512 fill_panel, 8 rows x 8 columns at a time.
void fill_panel(DType t, const uint8_t* w, size_t ws, int rows, int64_t k0, int64_t kn, float* panel) {
  for (int r0 = 0; r0 < kPanelRows; r0 += 8) {
    int64_t k = 0;
    for (; k + 8 <= kn; k += 8) {
      __m256 v[8];
      for (int i = 0; i < 8; ++i)
        v[i] = r0 + i < rows ? load8(t, w + static_cast<size_t>(r0 + i) * ws, k0 + k) : _mm256_setzero_ps();
      transpose8(v);
      for (int i = 0; i < 8; ++i) _mm256_store_ps(panel + (k + i) * kPanelRows + r0, v[i]);
    }
    fill_panel_ragged(t, w, ws, rows, k0, k, kn, r0, 8, panel);
  }
}

// Rows [r0, r0 + 16) x RN tokens over the panel's kn columns; token j of column k is a[k * stride + j].
template <int RN>
void panel_block(int64_t kn, const float* panel, int r0, const float* a, int stride, int rows, float* out, int64_t os,
                 bool add) {
  __m256 lo[RN], hi[RN];
  for (int j = 0; j < RN; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  const float* p = panel + r0;
  for (int64_t k = 0; k < kn; ++k, a += stride, p += kPanelRows) {
    const __m256 w0 = _mm256_load_ps(p), w1 = _mm256_load_ps(p + 8);
    for (int j = 0; j < RN; ++j) {
      const __m256 x = _mm256_broadcast_ss(a + j);
      lo[j] = _mm256_fmadd_ps(w0, x, lo[j]);
      hi[j] = _mm256_fmadd_ps(w1, x, hi[j]);
    }
  }
  // All sums leave the registers in one unrolled loop: indexing lo/hi inside the copy loop below
  // would make GCC keep them in memory, with a store per FMA in the loop above.
  alignas(32) float sums[RN][16];
  for (int j = 0; j < RN; ++j) {
    _mm256_store_ps(sums[j], lo[j]);
    _mm256_store_ps(sums[j] + 8, hi[j]);
  }
  const int n = std::min(16, rows - r0);
  for (int j = 0; j < RN; ++j) {
    float* o = out + j * os + r0;
    for (int i = 0; i < n; ++i) o[i] = add ? o[i] + sums[j][i] : sums[j][i];
  }
}

// Rows [0, rows) of RN tokens (a tile k-major with stride RN), in blocks of 16 rows x 6 tokens.
template <int RN>
void panel_tile(int64_t kn, const float* panel, const float* a, int rows, float* out, int64_t os, bool add) {
  constexpr int kBlockTokens = RN < 6 ? RN : 6;
  static_assert(RN % kBlockTokens == 0, "a tile splits into whole blocks");
  for (int r0 = 0; r0 < rows; r0 += 16)
    for (int j = 0; j < RN; j += kBlockTokens)
      panel_block<kBlockTokens>(kn, panel, r0, a + j, RN, rows, out + j * os, os, add);
}

}  // namespace

#define SLAKE_PANEL 1

#endif

#ifdef SLAKE_PANEL

bool panel_available() { return true; }

namespace {

// Width of the tile that holds token j, and whether j is its first token.
int64_t tile_width(int64_t j, int64_t n_tokens) {
  const int64_t full = n_tokens / kTileTokens * kTileTokens;
  if (j < full) return kTileTokens;
  return j < full + (n_tokens - full) / 4 * 4 ? 4 : 1;
}
bool starts_tile(int64_t j, int64_t n_tokens) {
  const int64_t full = n_tokens / kTileTokens * kTileTokens;
  return j < full ? j % kTileTokens == 0 : (j - full) % 4 == 0 || tile_width(j, n_tokens) == 1;
}

}  // namespace

void pack_panel_tile(const float* act, int64_t K, int64_t n_tokens, int64_t j, float* packed) {
  if (!starts_tile(j, n_tokens)) return;
  const int64_t w = tile_width(j, n_tokens);
  float* dst = packed + j * K;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < w; ++i) dst[k * w + i] = act[(j + i) * K + k];
}

void panel_rows(DType t, int64_t K, const uint8_t* w, size_t ws, int rows, const float* packed, int64_t n_tokens,
                float* out, int64_t os, float* panel) {
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) fail("panel_rows: float weights only");
  for (int64_t k0 = 0; k0 < K; k0 += kPanelK) {
    const int64_t kn = std::min(kPanelK, K - k0);
    fill_panel(t, w, ws, rows, k0, kn, panel);
    const bool add = k0 > 0;
    for (int64_t j = 0; j < n_tokens;) {
      const int64_t width = tile_width(j, n_tokens);
      const float* a = packed + j * K + k0 * width;
      float* o = out + j * os;
      if (width == kTileTokens) panel_tile<kTileTokens>(kn, panel, a, rows, o, os, add);
      else if (width == 4) panel_tile<4>(kn, panel, a, rows, o, os, add);
      else panel_tile<1>(kn, panel, a, rows, o, os, add);
      j += width;
    }
  }
}

#else

bool panel_available() { return false; }

void pack_panel_tile(const float*, int64_t, int64_t, int64_t, float*) { fail("panel kernel: not built for this CPU"); }
void panel_rows(DType, int64_t, const uint8_t*, size_t, int, const float*, int64_t, float*, int64_t, float*) {
  fail("panel kernel: not built for this CPU");
}

#endif

}  // namespace slake
