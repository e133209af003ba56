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
    return {_mm256_shuffle_epi8(iq4_values256(), nibbles32(p + quant::kIQ4NL_QS)), f16(p), 0.0f};
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

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__)
#define SLAKE_Q5_0_TILE512 1
// Q5_0 with AVX-512 VNNI: two blocks per 512-bit register (int32 lanes 0-7 hold block b's sums,
// 8-15 block b + 1's), so each (row, token) pair costs one signed-activation select, one dpbusd,
// one conversion and two float operations per 64 weights. AVX-512 has no byte sign instruction:
// sign(a, w) is a masked negation of a where w < 0 (a Q8_0 activation is never -128). An odd last
// block goes through the 256-bit step. Each (row, token) sum is the same whatever the tile shape.
//
// Two blocks decode straight into |w| and the sign mask: their 64 fifth bits are a mask register
// (w = u - 16 below it is negative exactly where that bit is clear, since u <= 15), so
// |w| = bit ? u : 16 - u, and the nibbles come from one 128-bit lane per half block.
// lo in float lanes 0-7, hi in 8-15: the scales of a pair of blocks.
inline __m512 halves(float lo, float hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

struct Q5_0Pair {
  __m512i abs;     // |w|
  __mmask64 neg;   // w < 0
  __m512 d;        // block b's scale in lanes 0-7, block b + 1's in 8-15
};
inline Q5_0Pair decode_q5_0_pair(const uint8_t* p) {
  constexpr size_t kB = Block<DType::Q5_0>::kBytes;
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + quant::kQ5_0_QS));
  const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kB + quant::kQ5_0_QS));
  const __m512i qq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q0, q0)), _mm256_set_m128i(q1, q1), 1);
  // Lanes [q0, q0 >> 4, q1, q1 >> 4] & 0x0F: the elements of both blocks in order.
  const __m512i u = _mm512_and_si512(_mm512_srlv_epi64(qq, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
  const __mmask64 bit = _cvtu64_mask64(static_cast<uint64_t>(quant::load_u32(p + quant::kQ5_0_QH)) |
                                       static_cast<uint64_t>(quant::load_u32(p + kB + quant::kQ5_0_QH)) << 32);
  const __m512i abs = _mm512_mask_mov_epi8(_mm512_sub_epi8(_mm512_set1_epi8(16), u), bit, u);
  return {abs, _knot_mask64(bit), halves(f16(p), f16(p + kB))};
}

template <int RM, int RN>
void tile_q5_0_512(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, int64_t os) {
  using B = Block<DType::Q5_0>;
  using A = Act<false>;
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    Q5_0Pair wp[RM];
    for (int i = 0; i < RM; ++i) {
      const uint8_t* p = w + i * ws + b * B::kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(p + RM * ws), _MM_HINT_T0);
      wp[i] = decode_q5_0_pair(p);
    }
    for (int j = 0; j < RN; ++j) {
      const uint8_t* p = a + j * as + b * A::kBytes;
      const __m512i aq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(A::qs(p)))),
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(A::qs(p + A::kBytes))), 1);
      const __m512 ad = halves(A::d(p), A::d(p + A::kBytes));
      for (int i = 0; i < RM; ++i) {
        const __m512i s = _mm512_mask_sub_epi8(aq, wp[i].neg, zero, aq);
        const __m512i d = _mm512_dpbusd_epi32(zero, wp[i].abs, s);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(wp[i].d, ad), acc[i][j]);
      }
    }
  }
  float tail[RN][RM] = {};
  if (b < nb) tile<DType::Q5_0, RM, RN>(1, w + b * B::kBytes, ws, a + b * A::kBytes, as, &tail[0][0], RM);
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) out[j * os + i] = hsum512(acc[i][j]) + tail[j][i];
}
#else
#define SLAKE_Q5_0_TILE512 0
#endif

template <DType T, int RM>
void tile_tokens(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int rn, float* out, int64_t os) {
#if SLAKE_Q5_0_TILE512
  if constexpr (T == DType::Q5_0) {
    switch (rn) {
      case 1: return tile_q5_0_512<RM, 1>(nb, w, ws, a, as, out, os);
      case 2: return tile_q5_0_512<RM, 2>(nb, w, ws, a, as, out, os);
      case 3: return tile_q5_0_512<RM, 3>(nb, w, ws, a, as, out, os);
      default: return tile_q5_0_512<RM, 4>(nb, w, ws, a, as, out, os);
    }
  }
#endif
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
