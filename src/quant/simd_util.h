// Helpers shared by the x86 SIMD dot-product kernels (quant_dot_simd.cpp, dot_simd_block32.cpp,
// dot_simd_kquants.cpp, dot_simd_x16_avx2.cpp): fp16 loads, horizontal sums, the IQ4 table and the
// u8 x s8 product of VNNI or AVX2.
#pragma once

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports as
// uninitialised (a false positive of the compiler's own headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "slake/quant/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SLAKE_SIMD_DOT 1

namespace slake::simd {

using quant::load_u16;

inline float f16(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

inline float hsum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Every cache line of an X16 group's block kAhead blocks on, into L1 or (kL2) L2: a group is one
// stream of blocks that the hardware prefetchers alone leave waiting on memory (Q6_K decode ran at
// a third of the rows kernel's speed with one line per block).
template <size_t kBlock, int kAhead, bool kL2>
inline void prefetch_block(const uint8_t* g) {
  for (size_t off = 0; off < kBlock; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(g + kAhead * kBlock + off), kL2 ? _MM_HINT_T1 : _MM_HINT_T0);
}

#if defined(__AVX512F__)
inline float hsum512(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

// The X16 layout's loads (dot_simd_x16.cpp, dot_simd_x16_block32.cpp): a vector of 16 rows'
// words, 4 activation bytes in every lane, 16 fp16 scalars as fp32 lanes.
inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
inline __m512 f16_lanes(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// The 16 IQ4 values + 128 (unsigned, for dpbusd) in every 128-bit lane, for a shuffle by nibble.
inline __m512i iq4_table512() {
  alignas(16) uint8_t shifted[16];
  for (int i = 0; i < 16; ++i) shifted[i] = static_cast<uint8_t>(quant::kIQ4Values[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted)));
}
#endif

// The 16 IQ4 values (kIQ4Values) in both 128-bit lanes, for a shuffle by nibble.
inline __m256i iq4_values256() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIQ4Values)));
}

inline int hsum_i32(__m256i v) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(h);
}

#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define SLAKE_VNNI_BUILD 1
#else
#define SLAKE_VNNI_BUILD 0
#endif
constexpr bool kVnni = SLAKE_VNNI_BUILD;

// acc + the eight int32 sums of four u8 x s8 products each. Without VNNI the pairs go through
// int16 (maddubs), which saturates beyond 32767: callers keep |u| * |s| * 2 below that there.
inline __m256i dot_u8_s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

}  // namespace slake::simd

#endif
