// AVX2 register tiles for the 32-element block types Q4_1, Q5_1 (against Q8_1 activations) and
// Q5_0, IQ4_NL (against Q8_0), up to 4 rows x 4 tokens per call as the Q4_0 tile: each weight
// block is decoded once per 4 tokens, each activation block loaded once per 4 rows.
//   Q4_1, Q5_1: the quants are unsigned (0..15, 0..31) and meet the activations directly; the
//     block's min m adds m * s_a, s_a = d_a * sum(a) from the Q8_1 block.
//   Q5_0 (q - 16), IQ4_NL (a table of 16 values in -127..113): signed, so |w| meets sign(a, w);
//     a pair sum is at most 2 * 127 * 127 = 32258, inside int16 for the non-VNNI path.
#include <cmath>

#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/quant/quant_dot.h"

#ifdef SLAKE_SIMD_DOT

namespace slake::simd {

namespace {

// The 32 nibbles of a block as bytes, element order (low nibbles first).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

// 16 in every byte whose element's fifth bit is set: byte i takes byte i / 8 of the 32 bits and
// tests bit i % 8 there.
inline __m256i fifth_bits32(const uint8_t* qh) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(quant::load_u32(qh))),
                                             _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                               0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

struct Decoded {
  __m256i q;  // unsigned quants, or the signed values
  float d, m;
};

template <DType T>
struct Block;

template <>
struct Block<DType::Q4_1> {
  static constexpr size_t kBytes = 20;
  static constexpr bool kMin = true, kSigned = false;
  static Decoded decode(const uint8_t* p) { return {nibbles32(p + quant::kQ4_1_QS), f16(p), f16(p + 2)}; }
};

template <>
struct Block<DType::Q5_1> {
  static constexpr size_t kBytes = 24;
  static constexpr bool kMin = true, kSigned = false;
  static Decoded decode(const uint8_t* p) {
    return {_mm256_or_si256(nibbles32(p + quant::kQ5_1_QS), fifth_bits32(p + quant::kQ5_1_QH)), f16(p), f16(p + 2)};
  }
};

template <>
struct Block<DType::Q5_0> {
  static constexpr size_t kBytes = 22;
  static constexpr bool kMin = false, kSigned = true;
  static Decoded decode(const uint8_t* p) {
    const __m256i u = _mm256_or_si256(nibbles32(p + quant::kQ5_0_QS), fifth_bits32(p + quant::kQ5_0_QH));
    return {_mm256_sub_epi8(u, _mm256_set1_epi8(16)), f16(p), 0.0f};
  }
};

template <>
struct Block<DType::IQ4_NL> {
  static constexpr size_t kBytes = 18;
  static constexpr bool kMin = false, kSigned = true;
  static Decoded decode(const uint8_t* p) {
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIQ4Values)));
    return {_mm256_shuffle_epi8(table, nibbles32(p + quant::kIQ4NL_QS)), f16(p), 0.0f};
  }
};

// An activation block: Q8_1 (float d, float s, qs) with a min, Q8_0 (fp16 d, qs) without.
template <bool kMin>
struct Act {
  static constexpr size_t kBytes = kMin ? sizeof(ActBlockQ8_1) : sizeof(ActBlockQ8_0);
  static float d(const uint8_t* p) {
    if constexpr (kMin) return reinterpret_cast<const ActBlockQ8_1*>(p)->d;
    else return f16(p);
  }
  static float s(const uint8_t* p) {
    if constexpr (kMin) return reinterpret_cast<const ActBlockQ8_1*>(p)->s;
    else return 0.0f;
  }
  static const uint8_t* qs(const uint8_t* p) { return p + (kMin ? 8 : 2); }
};

template <DType T, int RM, int RN>
void tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, int64_t os) {
  using B = Block<T>;
  using A = Act<B::kMin>;
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc[RM][RN];
  float macc[RM][RN] = {};
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Decoded wb[RM];
    __m256i wabs[RM];
    for (int i = 0; i < RM; ++i) {
      const uint8_t* p = w + i * ws + b * B::kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(p + RM * ws), _MM_HINT_T0);
      wb[i] = B::decode(p);
      if constexpr (B::kSigned) wabs[i] = _mm256_sign_epi8(wb[i].q, wb[i].q);
    }
    for (int j = 0; j < RN; ++j) {
      const uint8_t* p = a + j * as + b * A::kBytes;
      const float ad = A::d(p);
      const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(A::qs(p)));
      for (int i = 0; i < RM; ++i) {
        __m256i d;
        if constexpr (B::kSigned) d = dot_u8_s8(zero, wabs[i], _mm256_sign_epi8(aq, wb[i].q));
        else d = dot_u8_s8(zero, wb[i].q, aq);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(wb[i].d * ad), acc[i][j]);
        // One rounding whatever the tile shape (an explicit fma, not left to contraction), so a row
        // comes out the same in every tile: batched decoding relies on it (ops.h kMatmulExactRows).
        if constexpr (B::kMin) macc[i][j] = std::fma(wb[i].m, A::s(p), macc[i][j]);
      }
    }
  }
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) out[j * os + i] = hsum(acc[i][j]) + macc[i][j];
}

template <DType T, int RM>
void tile_tokens(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int rn, float* out, int64_t os) {
  switch (rn) {
    case 1: return tile<T, RM, 1>(nb, w, ws, a, as, out, os);
    case 2: return tile<T, RM, 2>(nb, w, ws, a, as, out, os);
    case 3: return tile<T, RM, 3>(nb, w, ws, a, as, out, os);
    default: return tile<T, RM, 4>(nb, w, ws, a, as, out, os);
  }
}

template <DType T>
void tile_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, int rn, float* out,
               int64_t os) {
  switch (rm) {
    case 1: return tile_tokens<T, 1>(nb, w, ws, a, as, rn, out, os);
    case 2: return tile_tokens<T, 2>(nb, w, ws, a, as, rn, out, os);
    case 3: return tile_tokens<T, 3>(nb, w, ws, a, as, rn, out, os);
    default: return tile_tokens<T, 4>(nb, w, ws, a, as, rn, out, os);
  }
}

}  // namespace

bool is_block32_type(DType t) {
  return t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::IQ4_NL;
}

void tile_block32(DType t, int64_t K, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, int rn,
                  float* out, int64_t os) {
  const int64_t nb = K / 32;
  switch (t) {
    case DType::Q4_1: return tile_rows<DType::Q4_1>(nb, w, ws, rm, a, as, rn, out, os);
    case DType::Q5_1: return tile_rows<DType::Q5_1>(nb, w, ws, rm, a, as, rn, out, os);
    case DType::Q5_0: return tile_rows<DType::Q5_0>(nb, w, ws, rm, a, as, rn, out, os);
    default: return tile_rows<DType::IQ4_NL>(nb, w, ws, rm, a, as, rn, out, os);
  }
}

}  // namespace slake::simd

#endif
