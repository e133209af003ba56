// AVX2 register tiles of the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS against Q8_K
// activations: one weight row x up to 4 tokens per pass. Each 256-element block is unpacked once,
// into 8 runs of 32 unsigned quants with the int16 scales of their two halves of 16, and every
// token of the tile meets it with 8 maddubs + madd pairs. The mins and offsets (Q2_K/Q4_K/Q5_K's
// mins, Q3_K's -4 and Q6_K's -32) are weights on the activations' group sums (bsums), one madd
// per token. IQ4_XS's table values are signed and have no offset that keeps a maddubs pair sum
// inside int16, so its runs hold |v| and each token's activations take v's signs (one sign per
// run). Each token keeps a float vector accumulator, summed across lanes once per row, so a
// token's result does not depend on which other tokens share the call.
#include <cstring>

#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/quant/quant_dot.h"

#ifdef SLAKE_SIMD_DOT

namespace slake::simd {

namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// One 256-element block, ready for every token: its dot product with activation block a is
//   a.d * (d * sum_r sum_e q[r][e] a[32 r + e] scale(r, e) - dmin * sum_g mins[g] a.bsums[g]).
// Quants stay below 64 (IQ4_XS: |v| <= 127, against activations in -127..127), so a maddubs pair
// sum is at most 2 * 127 * 127 < 32767.
struct UnpackedBlock {
  __m256i q[8];      // unsigned quants of each run of 32 elements (IQ4_XS: |v|)
  __m256i v[8];      // IQ4_XS only: the signed values, whose signs the activations take
  __m256i scale[8];  // run_scale of each run
  __m256i mins;      // int16 weight of each group of 16's activation sum
  float d, dmin;
};

// u.scale from the int16 scales of the 16 groups of 16: group 2r for run r's first half, 2r + 1
// for its second.
inline void run_scales(__m256i groups, UnpackedBlock& u) {
  const __m256i first8 = _mm256_permute2x128_si256(groups, groups, 0x00);
  const __m256i last8 = _mm256_permute2x128_si256(groups, groups, 0x11);
  for (int r = 0; r < 8; ++r) {
    const int b = 4 * (r % 4);  // byte of group 2r's lane within its half
    const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((b + 2) | ((b + 3) << 8))),
                                          _mm_set1_epi16(static_cast<int16_t>(b | ((b + 1) << 8))));
    u.scale[r] = _mm256_shuffle_epi8(r < 4 ? first8 : last8, pick);
  }
}

// Q2_K: per 128 elements, 32 bytes of quants at shifts 0, 2, 4, 6 give four runs; each group of
// 16 has a 4-bit scale (low) and a 4-bit min (high).
[[gnu::always_inline]] inline void unpack_q2_k(const uint8_t* w, UnpackedBlock& u) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + quant::kQ2K_SCALES));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  run_scales(_mm256_cvtepu8_epi16(_mm_and_si128(sc, m4)), u);
  u.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load32(w + quant::kQ2K_QS + 32 * h);
    for (int k = 0; k < 4; ++k) u.q[4 * h + k] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m3);
  }
  u.d = f16(w + quant::kQ2K_D);
  u.dmin = f16(w + quant::kQ2K_DMIN);
}

// Q3_K: the quant is u - 4, u = low 2 bits | the hmask bit << 2 (0..7); the -4 weighs the group
// sums by 4 * scale. Scales are 6-bit, offset 32 (signed).
[[gnu::always_inline]] inline void unpack_q3_k(const uint8_t* w, UnpackedBlock& u) {
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  // The 12 bytes of 6-bit scales rearranged into 16 (q3k_scale): the low nibbles of bytes 0..7
  // are groups 0..7 and their high nibbles groups 8..15; byte 8 + k holds the high 2 bits of
  // groups k, 4 + k, 8 + k, 12 + k.
  uint32_t s[3], m[4];
  std::memcpy(s, w + quant::kQ3K_SCALES, 12);
  for (int i = 0; i < 4; ++i)
    m[i] = ((s[i % 2] >> (4 * (i / 2))) & 0x0F0F0F0F) | (((s[2] >> (2 * i)) & 0x03030303) << 4);
  const __m256i groups = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m))),
                                          _mm256_set1_epi16(32));
  const __m256i hm = load32(w + quant::kQ3K_HMASK);
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load32(w + quant::kQ3K_QS + 32 * h);
    for (int k = 0; k < 4; ++k) {
      const int r = 4 * h + k;
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m3);
      const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, r), one), 2);
      u.q[r] = _mm256_or_si256(low, high);
    }
  }
  run_scales(groups, u);
  u.mins = _mm256_slli_epi16(groups, 2);
  u.d = u.dmin = f16(w + quant::kQ3K_D);
}

// Q4_K and Q5_K: per 64 elements, the low nibbles are one run and the high nibbles the next; each
// run has a 6-bit scale and a 6-bit min (packed in 12 bytes). Q5_K adds the fifth bit of element
// e at bit e / 32 of qh[e % 32].
template <bool kFifthBit>
[[gnu::always_inline]] inline void unpack_q4_q5_k(const uint8_t* w, UnpackedBlock& u) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const uint8_t* scales = w + (kFifthBit ? quant::kQ5K_SCALES : quant::kQ4K_SCALES);
  const uint8_t* qs = w + (kFifthBit ? quant::kQ5K_QS : quant::kQ4K_QS);
  // The 12 bytes of 6-bit scales and mins rearranged into 8 scale bytes then 8 min bytes.
  uint32_t m[4];
  std::memcpy(m, scales, 12);
  m[3] = ((m[2] >> 4) & 0x0F0F0F0F) | (((m[1] >> 6) & 0x03030303) << 4);
  const uint32_t mins_low = m[1] & 0x3F3F3F3F;
  m[1] = (m[2] & 0x0F0F0F0F) | (((m[0] >> 6) & 0x03030303) << 4);
  m[2] = mins_low;
  m[0] &= 0x3F3F3F3F;
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(m));
  const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(bytes));  // the 8 scales as int16
  for (int j = 0; j < 8; ++j)
    u.scale[j] = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<int16_t>((2 * j) | ((2 * j + 1) << 8))));
  const __m128i mins = _mm_srli_si128(bytes, 8);
  u.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins));  // each min for its two groups of 16
  for (int g = 0; g < 4; ++g) {
    const __m256i q = load32(qs + 32 * g);
    u.q[2 * g] = _mm256_and_si256(q, m4);
    u.q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
  if (kFifthBit) {
    const __m256i qh = load32(w + quant::kQ5K_QH);
    for (int r = 0; r < 8; ++r)
      u.q[r] = _mm256_or_si256(u.q[r], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, r), one), 4));
  }
  u.d = f16(w + (kFifthBit ? quant::kQ5K_D : quant::kQ4K_D));
  u.dmin = f16(w + (kFifthBit ? quant::kQ5K_DMIN : quant::kQ4K_DMIN));
}

// Q6_K: the quant is u - 32, u (0..63) rebuilt from 4 low bits in ql and 2 high bits in qh; each
// group of 16 has a signed 8-bit scale, and the -32 weighs the group sums by 32 * scale.
[[gnu::always_inline]] inline void unpack_q6_k(const uint8_t* w, UnpackedBlock& u) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + quant::kQ6K_SCALES)));
  run_scales(sc, u);
  u.mins = _mm256_slli_epi16(sc, 5);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = w + quant::kQ6K_QL + 64 * h;
    const __m256i qh = load32(w + quant::kQ6K_QH + 32 * h);
    const __m256i l0 = load32(ql), l1 = load32(ql + 32);
    u.q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    u.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    u.q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
    u.q[4 * h + 3] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
  }
  u.d = u.dmin = f16(w + quant::kQ6K_D);
}

// IQ4_XS: per 32 elements, 16 bytes of nibbles (low then high) looked up in the IQ4 table; each
// run's 6-bit scale - 32. No mins.
[[gnu::always_inline]] inline void unpack_iq4_xs(const uint8_t* w, UnpackedBlock& u) {
  const __m256i table = iq4_values256();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int r = 0; r < 8; ++r) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + quant::kIQ4XS_QS + 16 * r));
    u.v[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4));
    u.q[r] = _mm256_sign_epi8(u.v[r], u.v[r]);
  }
  // Run r's scale: the nibble r of scales_l | bits 2r, 2r + 1 of scales_h << 4, less 32.
  uint32_t low4;
  uint16_t high;
  std::memcpy(&low4, w + quant::kIQ4XS_SCALES_L, 4);
  std::memcpy(&high, w + quant::kIQ4XS_SCALES_H, 2);
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(low4));
  const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F)));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(high), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                      _mm256_set1_epi32(3));
  alignas(32) int32_t sc[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(sc),
                     _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32)));
  for (int r = 0; r < 8; ++r) u.scale[r] = _mm256_set1_epi16(static_cast<int16_t>(sc[r]));
  u.d = f16(w + quant::kIQ4XS_D);
  u.dmin = 0.0f;
}

using Unpack = void (*)(const uint8_t*, UnpackedBlock&);

// One row of K / 256 blocks of block_bytes each against RN tokens: out[j * os] for token j.
// kSigned: the runs are IQ4_XS's |v| and u.v, and there are no mins.
template <Unpack unpack, int RN, bool kSigned = false>
void row_tokens(size_t block_bytes, int64_t K, const uint8_t* w, const uint8_t* act, size_t as,
                float* out, int64_t os) {
  __m256 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm256_setzero_ps();
  UnpackedBlock u;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += block_bytes) {
    unpack(w, u);
    for (int j = 0; j < RN; ++j) {
      const auto& a = reinterpret_cast<const ActBlockQ8_K*>(act + j * as)[b];
      __m256i isum = _mm256_setzero_si256();
      for (int r = 0; r < 8; ++r) {
        const __m256i av = kSigned ? _mm256_sign_epi8(load32(a.qs + 32 * r), u.v[r]) : load32(a.qs + 32 * r);
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u.q[r], av), u.scale[r]));
      }
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * u.d), _mm256_cvtepi32_ps(isum), acc[j]);
      if (kSigned) continue;
      const __m256i msum = _mm256_madd_epi16(load32(a.bsums), u.mins);
      acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(a.d * u.dmin), _mm256_cvtepi32_ps(msum), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) out[j * os] = hsum(acc[j]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SLAKE_KQUANT_ROW512 1
// The same with AVX-512 VNNI: two runs per 512-bit register, one dpbusd per pair of runs (its
// int32 lane k sums the run's elements 4k .. 4k + 3, which share one group scale), the group
// scales applied as int32 products, so a block costs a token 4 dpbusd + 4 mullo + 4 add where the
// AVX2 path spends 8 maddubs + 8 madd + 8 add. Every quant is unsigned (offsets and mins are in
// u.mins), which dpbusd takes as they are. The int32 sums stay below 4 * 4 * 63 * 127 * 127.
template <Unpack unpack, int RN>
void row_tokens512(size_t block_bytes, int64_t K, const uint8_t* w, const uint8_t* act, size_t as, float* out, int64_t os) {
  __m512 acc[RN];
  __m256 accm[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps(), accm[j] = _mm256_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  // The int16 group scale each int32 lane's four elements share (both int16 halves hold it).
  auto scale32 = [](__m256i s16) { return _mm256_srai_epi32(_mm256_slli_epi32(s16, 16), 16); };
  UnpackedBlock u;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += block_bytes) {
    unpack(w, u);
    __m512i q2[4], s2[4];
    for (int p = 0; p < 4; ++p) {
      q2[p] = _mm512_inserti64x4(_mm512_castsi256_si512(u.q[2 * p]), u.q[2 * p + 1], 1);
      s2[p] = _mm512_inserti64x4(_mm512_castsi256_si512(scale32(u.scale[2 * p])), scale32(u.scale[2 * p + 1]), 1);
    }
    for (int j = 0; j < RN; ++j) {
      const auto& a = reinterpret_cast<const ActBlockQ8_K*>(act + j * as)[b];
      __m512i isum = zero;
      for (int p = 0; p < 4; ++p) {
        const __m512i d = _mm512_dpbusd_epi32(zero, q2[p], _mm512_loadu_si512(a.qs + 64 * p));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(d, s2[p]));
      }
      const __m256i msum = _mm256_madd_epi16(load32(a.bsums), u.mins);
      acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(a.d * u.d), _mm512_cvtepi32_ps(isum), acc[j]);
      accm[j] = _mm256_fnmadd_ps(_mm256_set1_ps(a.d * u.dmin), _mm256_cvtepi32_ps(msum), accm[j]);
    }
  }
  for (int j = 0; j < RN; ++j) out[j * os] = hsum512(acc[j]) + hsum(accm[j]);
}
#else
#define SLAKE_KQUANT_ROW512 0
#endif

template <int RN>
void tile_rows(DType t, int64_t K, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, float* out,
               int64_t os, bool prompt) {
  const size_t block_bytes = static_cast<size_t>(dtype_info(t).block_bytes);
  auto rows = [&](auto row) {
    for (int i = 0; i < rm; ++i) row(block_bytes, K, w + i * ws, a, as, out + i, os);
  };
#if SLAKE_KQUANT_ROW512
  // Prompts only: for one token the pairing costs what it saves, and decode steps must round as
  // the small batches of batched decoding do (ops.h kMatmulExactRows).
  if (prompt) switch (t) {
      case DType::Q2_K: return rows(row_tokens512<unpack_q2_k, RN>);
      case DType::Q3_K: return rows(row_tokens512<unpack_q3_k, RN>);
      case DType::Q4_K: return rows(row_tokens512<unpack_q4_q5_k<false>, RN>);
      case DType::Q5_K: return rows(row_tokens512<unpack_q4_q5_k<true>, RN>);
      case DType::Q6_K: return rows(row_tokens512<unpack_q6_k, RN>);
      default: break;
    }
#else
  (void)prompt;
#endif
  switch (t) {
    case DType::Q2_K: return rows(row_tokens<unpack_q2_k, RN>);
    case DType::Q3_K: return rows(row_tokens<unpack_q3_k, RN>);
    case DType::Q4_K: return rows(row_tokens<unpack_q4_q5_k<false>, RN>);
    case DType::Q5_K: return rows(row_tokens<unpack_q4_q5_k<true>, RN>);
    case DType::Q6_K: return rows(row_tokens<unpack_q6_k, RN>);
    default: return rows(row_tokens<unpack_iq4_xs, RN, /*kSigned=*/true>);  // IQ4_XS
  }
}

}  // namespace

bool is_kquant_type(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ||
         t == DType::IQ4_XS;
}

void tile_kquant(DType t, int64_t K, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, int rn,
                 float* out, int64_t os, bool prompt) {
  switch (rn) {
    case 1: tile_rows<1>(t, K, w, ws, rm, a, as, out, os, prompt); return;
    case 2: tile_rows<2>(t, K, w, ws, rm, a, as, out, os, prompt); return;
    case 3: tile_rows<3>(t, K, w, ws, rm, a, as, out, os, prompt); return;
    default: tile_rows<4>(t, K, w, ws, rm, a, as, out, os, prompt); return;
  }
}

}  // namespace slake::simd

#endif
