// AVX2 dot products of one row of Q2_K, Q3_K, Q5_K or IQ4_XS weights with one Q8_K activation
// row, as the Q4_K and Q6_K ones in quant_dot_simd.cpp: 32 quants at a time as unsigned bytes
// against the int8 activations (maddubs), the int16 pair sums weighted by the sub-block scales
// (madd), the offsets and mins settled once per block from the activations' group sums (bsums).
#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/quant_dot.h"

#ifdef SLAKE_SIMD_DOT

namespace slake::simd {

namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The int16 pair sums of 32 elements spanning two groups of 16, weighted by their scales s0
// (first 16) and s1, as int32.
inline __m256i scaled_pairs(__m256i u, __m256i a, int s0, int s1) {
  const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)), _mm_set1_epi16(static_cast<int16_t>(s0)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), scale);
}

// Q2_K: per 128 elements, 32 bytes of quants at shifts 0, 2, 4, 6 give four runs of 32; each run
// is two groups of 16 with their own 4-bit scale. The 4-bit mins meet the group sums.
float dot_q2_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  const __m256i m3 = _mm256_set1_epi8(3);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 84) {
    const uint8_t* sc = w + quant::kQ2K_SCALES;
    int32_t msum = 0;
    for (int g = 0; g < 16; ++g) msum += (sc[g] >> 4) * a[b].bsums[g];
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load32(w + quant::kQ2K_QS + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m3);
        const int g = 8 * h + 2 * k;
        isum = _mm256_add_epi32(isum, scaled_pairs(u, load32(a[b].qs + 128 * h + 32 * k), sc[g] & 0xF, sc[g + 1] & 0xF));
      }
    }
    sum += a[b].d * (f16(w + quant::kQ2K_D) * static_cast<float>(hsum_i32(isum)) -
                     f16(w + quant::kQ2K_DMIN) * static_cast<float>(msum));
  }
  return sum;
}

// Q3_K: the quant is u - 4 with u = low 2 bits | hmask bit << 2 (0..7); the -4 meets the group
// sums: sum_g s_g (sum u a - 4 bsum_g).
float dot_q3_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 110) {
    int scale[16];
    int32_t offset = 0;
    for (int g = 0; g < 16; ++g) {
      scale[g] = quant::q3k_scale(w, g);
      offset += scale[g] * a[b].bsums[g];
    }
    const __m256i hm = load32(w + quant::kQ3K_HMASK);
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load32(w + quant::kQ3K_QS + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m3);
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one), 2);
        const int g = 8 * h + 2 * k;
        isum = _mm256_add_epi32(
            isum, scaled_pairs(_mm256_or_si256(low, high), load32(a[b].qs + 128 * h + 32 * k), scale[g], scale[g + 1]));
      }
    }
    sum += a[b].d * f16(w + quant::kQ3K_D) * static_cast<float>(hsum_i32(isum) - 4 * offset);
  }
  return sum;
}

// Q5_K: Q4_K's nibbles with the fifth bit of element e at bit e / 32 of qh[e % 32].
float dot_q5_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 176) {
    uint8_t sc[8], mn[8];
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      quant::q4k_scale_min(j, w + quant::kQ5K_SCALES, &sc[j], &mn[j]);
      msum += mn[j] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
    }
    const __m256i qh = load32(w + quant::kQ5K_QH);
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load32(w + quant::kQ5K_QS + 32 * g);
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(a[b].qs + 64 * g)), _mm256_set1_epi16(sc[2 * g]));
      const __m256i p1 =
          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(a[b].qs + 64 * g + 32)), _mm256_set1_epi16(sc[2 * g + 1]));
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
    }
    sum += a[b].d * (f16(w + quant::kQ5K_D) * static_cast<float>(hsum_i32(isum)) -
                     f16(w + quant::kQ5K_DMIN) * static_cast<float>(msum));
  }
  return sum;
}

// IQ4_XS: per 32 elements, 16 bytes of nibbles looked up in the IQ4 table (signed values, so
// |v| meets sign(a, v)), weighted by the sub-block's 6-bit scale - 32.
float dot_iq4_xs(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIQ4Values)));
  const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 136) {
    __m256i isum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + quant::kIQ4XS_QS + 16 * j));
      const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
      const __m256i v = _mm256_shuffle_epi8(table, idx);
      const __m256i av = load32(a[b].qs + 32 * j);
      const __m256i d = dot_u8_s8(zero, _mm256_sign_epi8(v, v), _mm256_sign_epi8(av, v));
      isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(d, _mm256_set1_epi32(quant::iq4xs_scale(w, j))));
    }
    sum += a[b].d * f16(w + quant::kIQ4XS_D) * static_cast<float>(hsum_i32(isum));
  }
  return sum;
}

}  // namespace

bool is_kquant_row_type(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q5_K || t == DType::IQ4_XS;
}

float dot_kquant_row(DType t, int64_t K, const uint8_t* w, const uint8_t* act) {
  const auto* a = reinterpret_cast<const ActBlockQ8_K*>(act);
  switch (t) {
    case DType::Q2_K: return dot_q2_k(K, w, a);
    case DType::Q3_K: return dot_q3_k(K, w, a);
    case DType::Q5_K: return dot_q5_k(K, w, a);
    default: return dot_iq4_xs(K, w, a);
  }
}

}  // namespace slake::simd

#endif
