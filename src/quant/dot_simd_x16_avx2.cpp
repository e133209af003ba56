// The X16 layout's kernels on AVX2 without AVX-512 VNNI (quant_dot.h gives the layout), for every
// X16 type: Q2_K..Q6_K and IQ4_XS. Each 256-bit half of a group's 64-byte vector is 8 rows, one
// per 32-bit lane, so maddubs meets 4 quants of 8 rows with 4 activation bytes broadcast, and
// nothing is summed across lanes. For several tokens a block is unpacked once into plain quants
// (two halves of 64 or 128 vectors and their scales, 5.6 or 8.6 KiB on the stack) for all of
// them; for one token (decode) each word is unpacked in registers and meets the token at once.
// The pair sums add up in int16 while they cannot wrap, and one madd with the rows' scales takes
// them to int32: a Q4_K sub-block's 8 words (at most 8 x 2 x 15 x 128 = 30720), Q5_K's 4
// (4 x 2 x 31 x 128 = 31744), a Q2_K or Q3_K group's 4 (4 x 2 x 7 x 128 = 7168), Q6_K's 2 at a
// time (2 x 2 x 63 x 128 = 32256), IQ4_XS's one (its signed values meet the activations through
// the sign trick). The mins and offsets meet the activations' group sums through madd, two groups
// per instruction. Each token's block sum is exact in int32 and scaled once per block in fp32, in
// block order, so a token's result does not depend on the other tokens of the call: decode and
// batches round alike.
#include <algorithm>
#include <cstring>
#include <string>

#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/error.h"
#include "slake/quant/quant_dot.h"

#if defined(SLAKE_SIMD_DOT) && !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__))
#define SLAKE_X16_AVX2 1
#endif

namespace slake::simd {

#ifdef SLAKE_X16_AVX2
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// 8 int32 lanes from 8 bytes; 8 fp32 lanes from 8 fp16.
inline __m256i u8_lanes(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m256 f16_lanes(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// low in the low int16 half of each lane, high in the high half (both signed, |v| < 2^15); with
// low = high = v, madd scales a lane's two pair sums by v.
inline __m256i int16_pair(__m256i low, __m256i high) {
  return _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(high, 16));
}

// A block's sums for one token added to half h's accumulator: d ad isum - dm ad msum, the two
// apart in fp32, or (kJoint, dm = d) d ad (isum - msum). The one-token and several-token paths
// both end here, so they round alike.
template <bool kJoint>
inline __m256 add_block(__m256 acc, __m256 d, __m256 dm, __m256i isum, __m256i msum, float act_d) {
  const __m256 ad = _mm256_set1_ps(act_d);
  if (kJoint) return _mm256_fmadd_ps(_mm256_mul_ps(d, ad), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, msum)), acc);
  acc = _mm256_fmadd_ps(_mm256_mul_ps(d, ad), _mm256_cvtepi32_ps(isum), acc);
  return _mm256_fnmadd_ps(_mm256_mul_ps(dm, ad), _mm256_cvtepi32_ps(msum), acc);
}

// --- Q4_K and Q5_K (kFifth): d sum_r sc(r) sum_e q a - dmin sum_r m(r) (bsum(2r) + bsum(2r+1)) ---
// over sub-blocks r of 32. Q5_K's group is Q4_K's with the 8 words of qh at 2304.

template <bool kFifth>
constexpr size_t kQ45KGroupBlock = 16 * (kFifth ? 176 : 144);
// The words whose pair sums add up in int16 before the madd with their sub-block's scale.
template <bool kFifth>
constexpr int kInt16Words = kFifth ? 4 : 8;

// Sub-block r's scale and min of half h's 8 rows, each as an int16 pair.
inline __m256i q4_k_scale(const uint8_t* g, int h, int r) {
  const __m256i s = _mm256_and_si256(u8_lanes(g + 64 + 16 * r + 8 * h), _mm256_set1_epi32(63));
  return int16_pair(s, s);
}
inline __m256i q4_k_min(const uint8_t* g, int h, int r) {
  const __m256i b = u8_lanes(g + 64 + 16 * r + 8 * h), n = u8_lanes(g + 192 + 16 * (r / 2) + 8 * h);
  const __m256i low = r % 2 ? _mm256_srli_epi32(n, 4) : _mm256_and_si256(n, _mm256_set1_epi32(15));
  const __m256i m = _mm256_or_si256(low, _mm256_slli_epi32(_mm256_srli_epi32(b, 6), 4));
  return int16_pair(m, m);
}
// Bit s of each byte of qh as 16, through a compare rather than a shift (the shifts are the
// one-token kernels' busiest port).
inline __m256i fifth_bit(__m256i qh, int s) {
  const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << s));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10));
}
// Half h of qs word 8c + k: lo = the low nibbles (sub-block 2c, elements 64c + 4k..), hi = the
// high (sub-block 2c + 1, elements 64c + 32 + 4k..); Q5_K's fifth bits are bits 2c and 2c + 1 of
// the bytes of qh word k.
template <bool kFifth>
inline void q45_word(const uint8_t* g, int h, int c, int k, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load256(g + 256 + 64 * (8 * c + k) + 32 * h);
  lo = _mm256_and_si256(v, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if (kFifth) {
    const __m256i qh = load256(g + 2304 + 64 * k + 32 * h);
    lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * c));
    hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * c + 1));
  }
}

// Block g of a Q4_K or Q5_K group, both halves: u[h][8c + k] and u[h][32 + 8c + k] the lo and hi
// of q45_word c, k.
struct UnpackedQ45K {
  __m256i u[2][64];
  __m256i sc[2][8];  // each row's sub-block scale, as an int16 pair
  __m256i mn[2][8];  // each row's sub-block min, as an int16 pair
  __m256 d[2], dm[2];
};

template <bool kFifth>
void unpack_q45_k(const uint8_t* g, UnpackedQ45K& U) {
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 8; ++k) q45_word<kFifth>(g, h, c, k, U.u[h][8 * c + k], U.u[h][32 + 8 * c + k]);
    for (int r = 0; r < 8; ++r) U.sc[h][r] = q4_k_scale(g, h, r), U.mn[h][r] = q4_k_min(g, h, r);
    U.d[h] = f16_lanes(g + 16 * h);
    U.dm[h] = f16_lanes(g + 32 + 16 * h);
  }
}

// Block b's contribution for one token (activation block a), added to out[0..15]. Both halves
// meet each broadcast: two vectors of quants and one of activations per two maddubs, within what
// the core loads per cycle.
template <bool kFifth>
inline void token_q45_k(const UnpackedQ45K& U, const ActBlockQ8_K& a, float* out) {
  constexpr int kW = kInt16Words<kFifth>;
  __m256i isum[2], msum[2];
  for (int h = 0; h < 2; ++h) isum[h] = msum[h] = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) {
    const __m256i bs = bcast32(a.bsums + 2 * r);
    for (int h = 0; h < 2; ++h) msum[h] = _mm256_add_epi32(msum[h], _mm256_madd_epi16(U.mn[h][r], bs));
  }
  for (int s = 0; s < 8; ++s) {  // sub-block s: c = s / 2, low nibbles when s is even
    const int8_t* qs = a.qs + 32 * s;
    const int base = s % 2 ? 32 + 8 * (s / 2) : 8 * (s / 2);
    for (int k0 = 0; k0 < 8; k0 += kW) {
      __m256i p[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int k = k0; k < k0 + kW; ++k) {
        const __m256i av = bcast32(qs + 4 * k);
        for (int h = 0; h < 2; ++h) p[h] = _mm256_add_epi16(p[h], _mm256_maddubs_epi16(U.u[h][base + k], av));
      }
      for (int h = 0; h < 2; ++h) isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(p[h], U.sc[h][s]));
    }
  }
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_ps(out + 8 * h, add_block<false>(_mm256_loadu_ps(out + 8 * h), U.d[h], U.dm[h], isum[h], msum[h], a.d));
}

// The loop every one-token kernel shares (decode: each quant word is unpacked in registers and
// meets the token at once, so nothing goes through memory): per block, body(g, a, isum, msum)
// gives both halves' integer sums, and add_block scales them (dm: dmin at 32 unless kJoint), as
// the several-token path's token function does, so the two agree bit for bit.
template <size_t kBlock, bool kJoint, class Body>
inline void token1_blocks(int64_t nb, const uint8_t* group, const uint8_t* act, float* out, Body body) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    // Into L1, 2 blocks ahead. The AVX-512 tiles fetch into L2 (dot_simd_x16.cpp); this build on a
    // Zen 4 gained from that only in Q5_K (one token, one thread: 618-634 -> 431-480 us), and the
    // AVX2 machines it is for are not measured.
    prefetch_block<kBlock, 2, false>(g);
    const ActBlockQ8_K& a = reinterpret_cast<const ActBlockQ8_K*>(act)[b];
    __m256i isum[2], msum[2];
    for (int h = 0; h < 2; ++h) isum[h] = msum[h] = _mm256_setzero_si256();
    body(g, a, isum, msum);
    for (int h = 0; h < 2; ++h) {
      const __m256 d = f16_lanes(g + 16 * h);
      acc[h] = add_block<kJoint>(acc[h], d, kJoint ? d : f16_lanes(g + 32 + 16 * h), isum[h], msum[h], a.d);
    }
  }
  for (int h = 0; h < 2; ++h) _mm256_storeu_ps(out + 8 * h, acc[h]);
}

// One token: low nibbles and high of each word; the same sums as token_q45_k.
template <bool kFifth>
void token1_q45_k(int64_t nb, const uint8_t* group, const uint8_t* act, float* out) {
  constexpr int kW = kInt16Words<kFifth>;
  token1_blocks<kQ45KGroupBlock<kFifth>, false>(nb, group, act, out, [](const uint8_t* g, const ActBlockQ8_K& a, __m256i(&isum)[2], __m256i(&msum)[2]) {
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high)
      for (int k0 = 0; k0 < 8; k0 += kW) {
        __m256i plo[2], phi[2];
        for (int h = 0; h < 2; ++h) plo[h] = phi[h] = _mm256_setzero_si256();
        for (int k = k0; k < k0 + kW; ++k) {
          const __m256i alo = bcast32(a.qs + 64 * c + 4 * k), ahi = bcast32(a.qs + 64 * c + 32 + 4 * k);
          for (int h = 0; h < 2; ++h) {
            __m256i lo, hi;
            q45_word<kFifth>(g, h, c, k, lo, hi);
            plo[h] = _mm256_add_epi16(plo[h], _mm256_maddubs_epi16(lo, alo));
            phi[h] = _mm256_add_epi16(phi[h], _mm256_maddubs_epi16(hi, ahi));
          }
        }
        for (int h = 0; h < 2; ++h) {
          isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(plo[h], q4_k_scale(g, h, 2 * c)));
          isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(phi[h], q4_k_scale(g, h, 2 * c + 1)));
        }
      }
      for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 2; ++q)
          msum[h] = _mm256_add_epi32(msum[h], _mm256_madd_epi16(q4_k_min(g, h, 2 * c + q), bcast32(a.bsums + 2 * (2 * c + q))));
    }
  });
}

// --- Q2_K, Q3_K and Q6_K: a scale per group s of 16 elements ---------------------------------
//   Q2_K: d sum_s sc(s) sum_e q a - dmin sum_s m(s) bsum(s), q in 0..3;
//   Q3_K: d sum_s sc(s) (sum_e u a - 4 bsum(s)), u = q + 4 in 0..7, sc(s) signed;
//   Q6_K: d sum_s sc(s) (sum_e u a - 32 bsum(s)), u = q + 32 in 0..63, sc(s) signed.

// Block b of such a group, both halves, in element order: u[h][e / 4] holds elements e..e+3.
struct UnpackedG16 {
  __m256i u[2][64];
  __m256i sc[2][16];  // each group's scale, as a signed int16 pair
  __m256i mo[2][8];   // the weights of bsums 2p, 2p + 1 (mins or offsets), as an int16 pair
  __m256 d[2], dm[2];
};

// Block b's contribution for one token, added to out[0..15]: kWords words add up in int16 before
// the madd with their group's scale; kJoint where the offsets scale with d (dm = d).
template <int kWords, bool kJoint>
inline void token_g16(const UnpackedG16& U, const ActBlockQ8_K& a, float* out) {
  __m256i isum[2], msum[2];
  for (int h = 0; h < 2; ++h) isum[h] = msum[h] = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {
    const __m256i bs = bcast32(a.bsums + 2 * p);
    for (int h = 0; h < 2; ++h) msum[h] = _mm256_add_epi32(msum[h], _mm256_madd_epi16(U.mo[h][p], bs));
  }
  for (int v = 0; v < 64; v += kWords) {  // words v .. v + kWords - 1 of group v / 4
    __m256i p[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int i = 0; i < kWords; ++i) {
      const __m256i av = bcast32(a.qs + 4 * (v + i));
      for (int h = 0; h < 2; ++h) p[h] = _mm256_add_epi16(p[h], _mm256_maddubs_epi16(U.u[h][v + i], av));
    }
    for (int h = 0; h < 2; ++h) isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(p[h], U.sc[h][v / 4]));
  }
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_ps(out + 8 * h, add_block<kJoint>(_mm256_loadu_ps(out + 8 * h), U.d[h], U.dm[h], isum[h], msum[h], a.d));
}

// Q2_K/Q3_K: element 128hh + 32m + 4k + j (group 8hh + 2m + k/4) is at bits 2m of byte j of qs
// word 8hh + k (Q2_K's at 320, Q3_K's at 736); Q3_K's third bit is bit 4hh + m of hmask word k (at
// 224). Q2_K's group byte (at 64): scale low, min high nibble. Q3_K's scales: the low 4 bits per
// pair of groups at 32, the high 2 bits per quad at 160.
template <bool kThird>
constexpr size_t kQ23KGroupBlock = 16 * (kThird ? 110 : 84);

inline __m256i q2_scale(const uint8_t* g, int h, int s) { return _mm256_and_si256(u8_lanes(g + 64 + 16 * s + 8 * h), _mm256_set1_epi32(15)); }
inline __m256i q2_min(const uint8_t* g, int h, int s) { return _mm256_srli_epi32(u8_lanes(g + 64 + 16 * s + 8 * h), 4); }
inline __m256i q3_scale(const uint8_t* g, int h, int s) {
  const __m256i low = u8_lanes(g + 32 + 16 * (s / 2) + 8 * h), high = u8_lanes(g + 160 + 16 * (s / 4) + 8 * h);
  const __m256i l4 = s % 2 ? _mm256_srli_epi32(low, 4) : _mm256_and_si256(low, _mm256_set1_epi32(15));
  const __m256i h2 = _mm256_and_si256(_mm256_srli_epi32(high, 2 * (s % 4)), _mm256_set1_epi32(3));
  return _mm256_sub_epi32(_mm256_or_si256(l4, _mm256_slli_epi32(h2, 4)), _mm256_set1_epi32(32));
}
template <bool kThird>
inline __m256i q23_scale(const uint8_t* g, int h, int s) { return kThird ? q3_scale(g, h, s) : q2_scale(g, h, s); }
// The weights of bsums s - 1, s (s odd) from the two groups' scales: Q2_K's mins, Q3_K's 4 sc.
template <bool kThird>
inline __m256i q23_offset_pair(const uint8_t* g, int h, int s, __m256i sc_prev, __m256i sc) {
  if (kThird) return int16_pair(_mm256_slli_epi32(sc_prev, 2), _mm256_slli_epi32(sc, 2));
  return int16_pair(q2_min(g, h, s - 1), q2_min(g, h, s));
}
// Half h of word i < 4 of group s (elements 16s + 4i..).
template <bool kThird>
inline __m256i q23_word(const uint8_t* g, int h, int s, int i) {
  const int hh = s / 8, m = (s % 8) / 2, k = 4 * (s % 2) + i;
  const __m256i q = load256(g + (kThird ? 736 : 320) + 64 * (8 * hh + k) + 32 * h);
  const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * m), _mm256_set1_epi8(3));
  if (!kThird) return low;
  // The hmask bit 4hh + m as 4, through a compare rather than a shift: the shifts are this
  // kernel's busiest port.
  const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * hh + m)));
  const __m256i hm = load256(g + 224 + 64 * k + 32 * h);
  return _mm256_or_si256(low, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), _mm256_set1_epi8(4)));
}

template <bool kThird>
void unpack_q23_k(const uint8_t* g, UnpackedG16& U) {
  for (int h = 0; h < 2; ++h) {
    __m256i prev = _mm256_setzero_si256();
    for (int s = 0; s < 16; ++s) {
      for (int i = 0; i < 4; ++i) U.u[h][4 * s + i] = q23_word<kThird>(g, h, s, i);
      const __m256i v = q23_scale<kThird>(g, h, s);
      U.sc[h][s] = int16_pair(v, v);
      if (s % 2) U.mo[h][s / 2] = q23_offset_pair<kThird>(g, h, s, prev, v);
      prev = v;
    }
    U.d[h] = f16_lanes(g + 16 * h);
    U.dm[h] = kThird ? U.d[h] : f16_lanes(g + 32 + 16 * h);
  }
}

// One token: the same sums as token_g16<4>.
template <bool kThird>
void token1_q23_k(int64_t nb, const uint8_t* group, const uint8_t* act, float* out) {
  token1_blocks<kQ23KGroupBlock<kThird>, kThird>(nb, group, act, out, [](const uint8_t* g, const ActBlockQ8_K& a, __m256i(&isum)[2], __m256i(&msum)[2]) {
    __m256i prev[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int s = 0; s < 16; ++s) {
      __m256i p[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int i = 0; i < 4; ++i) {
        const __m256i av = bcast32(a.qs + 16 * s + 4 * i);
        for (int h = 0; h < 2; ++h) p[h] = _mm256_add_epi16(p[h], _mm256_maddubs_epi16(q23_word<kThird>(g, h, s, i), av));
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i v = q23_scale<kThird>(g, h, s);
        isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(p[h], int16_pair(v, v)));
        if (s % 2)
          msum[h] = _mm256_add_epi32(msum[h], _mm256_madd_epi16(q23_offset_pair<kThird>(g, h, s, prev[h], v), bcast32(a.bsums + s - 1)));
        prev[h] = v;
      }
    }
  });
}

// Q6_K: ql words at 288, qh words at 2336, the 16 int8 scales at 32.
constexpr size_t kQ6KGroupBlock = 16 * 210;

inline __m256i q6_scale(const uint8_t* g, int h, int s) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * s + 8 * h)));
}
// The high 2 bits for quant m < 4 of a qh byte, at bits 4-5. The left shifts are multiplies, off
// the shift port that the one-token kernel keeps busiest (5% in the kernel benchmark).
inline __m256i q6_high_bits(__m256i hb, int m) {
  const __m256i m30 = _mm256_set1_epi8(0x30);
  switch (m) {
    case 0: return _mm256_and_si256(_mm256_mullo_epi16(hb, _mm256_set1_epi16(16)), m30);
    case 1: return _mm256_and_si256(_mm256_mullo_epi16(hb, _mm256_set1_epi16(4)), m30);
    case 2: return _mm256_and_si256(hb, m30);
    default: return _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30);
  }
}
// Half h of ql word k < 16 of block half hh: lo = elements 128hh + 4k.. (group 8hh + k/4), hi =
// elements 128hh + 64 + 4k.. (group 8hh + 4 + k/4); their high bits in qh word 8hh + k % 8.
inline void q6_word(const uint8_t* g, int h, int hh, int k, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load256(g + 288 + 64 * (16 * hh + k) + 32 * h), hb = load256(g + 2336 + 64 * (8 * hh + k % 8) + 32 * h);
  lo = _mm256_or_si256(_mm256_and_si256(v, m4), q6_high_bits(hb, k / 8));
  hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), q6_high_bits(hb, 2 + k / 8));
}
// The 32 sc(2p), 32 sc(2p + 1) pair that meets bsums 2p, 2p + 1.
inline __m256i q6_offset_pair(const uint8_t* g, int h, int p) {
  return int16_pair(_mm256_slli_epi32(q6_scale(g, h, 2 * p), 5), _mm256_slli_epi32(q6_scale(g, h, 2 * p + 1), 5));
}

void unpack_q6_k(const uint8_t* g, UnpackedG16& U) {
  for (int h = 0; h < 2; ++h) {
    for (int hh = 0; hh < 2; ++hh)
      for (int k = 0; k < 16; ++k) q6_word(g, h, hh, k, U.u[h][32 * hh + k], U.u[h][32 * hh + 16 + k]);
    for (int s = 0; s < 16; ++s) {
      const __m256i v = q6_scale(g, h, s);
      U.sc[h][s] = int16_pair(v, v);
    }
    for (int p = 0; p < 8; ++p) U.mo[h][p] = q6_offset_pair(g, h, p);
    U.d[h] = U.dm[h] = f16_lanes(g + 16 * h);
  }
}

// One token: the same sums as token_g16<2>.
void token1_q6_k(int64_t nb, const uint8_t* group, const uint8_t* act, float* out) {
  token1_blocks<kQ6KGroupBlock, true>(nb, group, act, out, [](const uint8_t* g, const ActBlockQ8_K& a, __m256i(&isum)[2], __m256i(&msum)[2]) {
    for (int p = 0; p < 8; ++p) {
      const __m256i bs = bcast32(a.bsums + 2 * p);
      for (int h = 0; h < 2; ++h) msum[h] = _mm256_add_epi32(msum[h], _mm256_madd_epi16(q6_offset_pair(g, h, p), bs));
    }
    for (int hh = 0; hh < 2; ++hh)
      for (int k = 0; k < 16; k += 2) {  // words k, k + 1: groups 8hh + k/4 (lo) and 8hh + 4 + k/4 (hi)
        const int8_t* qs = a.qs + 128 * hh + 4 * k;
        const __m256i alo0 = bcast32(qs), alo1 = bcast32(qs + 4), ahi0 = bcast32(qs + 64), ahi1 = bcast32(qs + 68);
        for (int h = 0; h < 2; ++h) {
          __m256i lo0, hi0, lo1, hi1;
          q6_word(g, h, hh, k, lo0, hi0);
          q6_word(g, h, hh, k + 1, lo1, hi1);
          const __m256i plo = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, alo0), _mm256_maddubs_epi16(lo1, alo1));
          const __m256i phi = _mm256_add_epi16(_mm256_maddubs_epi16(hi0, ahi0), _mm256_maddubs_epi16(hi1, ahi1));
          const __m256i slo = q6_scale(g, h, 8 * hh + k / 4), shi = q6_scale(g, h, 8 * hh + 4 + k / 4);
          isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(plo, int16_pair(slo, slo)));
          isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(phi, int16_pair(shi, shi)));
        }
      }
  });
}

// --- IQ4_XS: d sum_r sc(r) sum_e v a over sub-blocks r of 32, v = kIQ4Values[nibble] ----------
// The values are signed, and no offset keeps an unsigned pair sum inside int16, so maddubs takes
// |v| against the activations with v's signs (Q8_K activations are -127..127, as the sign trick
// needs: -128 would keep its sign). A pair sum reaches 2 x 127 x 127 = 32258, so each word meets
// its sub-block's scale through a madd of its own.

constexpr size_t kIQ4XSGroupBlock = 16 * 136;

// Sub-block r's scale (-32..31) of half h's 8 rows, as an int16 pair: the nibble r of scales_l
// (words at 64) | bits 2r, 2r + 1 of scales_h (u16 at 32) << 4, less 32.
inline __m256i iq4_scale(const uint8_t* g, int h, int r) {
  const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * h)));
  const __m256i l4 = _mm256_and_si256(_mm256_srli_epi32(load256(g + 64 + 32 * h), 4 * r), _mm256_set1_epi32(15));
  const __m256i h2 = _mm256_and_si256(_mm256_srli_epi32(sh, 2 * r), _mm256_set1_epi32(3));
  const __m256i v = _mm256_sub_epi32(_mm256_or_si256(l4, _mm256_slli_epi32(h2, 4)), _mm256_set1_epi32(32));
  return int16_pair(v, v);
}
// Half h of qs word 4r + w (at 128): lo = the values of elements 32r + 4w.., hi = of 32r + 16 + 4w..
inline void iq4_word(const uint8_t* g, __m256i table, int h, int r, int w, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load256(g + 128 + 64 * (4 * r + w) + 32 * h);
  lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
  hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
}
// One word's products, scaled: sc (sum of |v| x sign(a, v)).
inline __m256i iq4_term(__m256i abs_v, __m256i v, __m256i av, __m256i sc) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_v, _mm256_sign_epi8(av, v)), sc);
}

// Block b of an IQ4_XS group, both halves, in element order: v[h][e / 4] holds elements e..e+3.
struct UnpackedIQ4XS {
  __m256i v[2][64], abs_v[2][64];
  __m256i sc[2][8];  // iq4_scale
  __m256 d[2];
};

void unpack_iq4_xs(const uint8_t* g, UnpackedIQ4XS& U) {
  const __m256i table = iq4_values256();
  for (int h = 0; h < 2; ++h) {
    for (int r = 0; r < 8; ++r) {
      for (int w = 0; w < 4; ++w) iq4_word(g, table, h, r, w, U.v[h][8 * r + w], U.v[h][8 * r + 4 + w]);
      U.sc[h][r] = iq4_scale(g, h, r);
    }
    for (int i = 0; i < 64; ++i) U.abs_v[h][i] = _mm256_abs_epi8(U.v[h][i]);
    U.d[h] = f16_lanes(g + 16 * h);
  }
}

inline void token_iq4_xs(const UnpackedIQ4XS& U, const ActBlockQ8_K& a, float* out) {
  __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int i = 0; i < 64; ++i) {
    const __m256i av = bcast32(a.qs + 4 * i);
    for (int h = 0; h < 2; ++h) isum[h] = _mm256_add_epi32(isum[h], iq4_term(U.abs_v[h][i], U.v[h][i], av, U.sc[h][i / 8]));
  }
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_ps(out + 8 * h, add_block<true>(_mm256_loadu_ps(out + 8 * h), U.d[h], U.d[h], isum[h], _mm256_setzero_si256(), a.d));
}

// One token: the same sums as token_iq4_xs (no mins: msum stays 0).
void token1_iq4_xs(int64_t nb, const uint8_t* group, const uint8_t* act, float* out) {
  const __m256i table = iq4_values256();
  token1_blocks<kIQ4XSGroupBlock, true>(nb, group, act, out, [table](const uint8_t* g, const ActBlockQ8_K& a, __m256i(&isum)[2], __m256i(&)[2]) {
    for (int r = 0; r < 8; ++r) {
      const __m256i sc[2] = {iq4_scale(g, 0, r), iq4_scale(g, 1, r)};
      for (int w = 0; w < 4; ++w) {
        const __m256i alo = bcast32(a.qs + 32 * r + 4 * w), ahi = bcast32(a.qs + 32 * r + 16 + 4 * w);
        for (int h = 0; h < 2; ++h) {
          __m256i lo, hi;
          iq4_word(g, table, h, r, w, lo, hi);
          isum[h] = _mm256_add_epi32(isum[h], iq4_term(_mm256_abs_epi8(lo), lo, alo, sc[h]));
          isum[h] = _mm256_add_epi32(isum[h], iq4_term(_mm256_abs_epi8(hi), hi, ahi, sc[h]));
        }
      }
    }
  });
}

// A group's blocks against n tokens: one token through token1 (unpacked in registers), several
// through each block unpacked once for all of them (Unpacked, unpack, token).
template <size_t kBlock, class Unpacked, void (*unpack)(const uint8_t*, Unpacked&),
          void (*token)(const Unpacked&, const ActBlockQ8_K&, float*), void (*token1)(int64_t, const uint8_t*, const uint8_t*, float*)>
void group_blocks(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, int64_t n, float* out, int64_t os) {
  if (n == 1) return token1(nb, group, act, out);
  for (int64_t j = 0; j < n; ++j) std::fill(out + j * os, out + j * os + kGroupRowsX16, 0.0f);
  alignas(32) Unpacked U;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    prefetch_block<kBlock, 2, false>(g);
    unpack(g, U);
    for (int64_t j = 0; j < n; ++j) token(U, reinterpret_cast<const ActBlockQ8_K*>(act + static_cast<size_t>(j) * as)[b], out + j * os);
  }
}

}  // namespace
#endif

bool x16_avx2_type(DType t) {
#ifdef SLAKE_X16_AVX2
  return x16_kquant_type(t);
#else
  (void)t;
  return false;
#endif
}

void group_x16_avx2(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t as, int64_t n, float* out, int64_t os) {
#ifdef SLAKE_X16_AVX2
  if (t == DType::Q4_K)
    return group_blocks<kQ45KGroupBlock<false>, UnpackedQ45K, unpack_q45_k<false>, token_q45_k<false>, token1_q45_k<false>>(
        K / 256, group, act, as, n, out, os);
  if (t == DType::Q5_K)
    return group_blocks<kQ45KGroupBlock<true>, UnpackedQ45K, unpack_q45_k<true>, token_q45_k<true>, token1_q45_k<true>>(
        K / 256, group, act, as, n, out, os);
  if (t == DType::Q2_K)
    return group_blocks<kQ23KGroupBlock<false>, UnpackedG16, unpack_q23_k<false>, token_g16<4, false>, token1_q23_k<false>>(
        K / 256, group, act, as, n, out, os);
  if (t == DType::Q3_K)
    return group_blocks<kQ23KGroupBlock<true>, UnpackedG16, unpack_q23_k<true>, token_g16<4, true>, token1_q23_k<true>>(
        K / 256, group, act, as, n, out, os);
  if (t == DType::IQ4_XS)
    return group_blocks<kIQ4XSGroupBlock, UnpackedIQ4XS, unpack_iq4_xs, token_iq4_xs, token1_iq4_xs>(K / 256, group, act, as, n, out, os);
  if (t == DType::Q6_K)
    return group_blocks<kQ6KGroupBlock, UnpackedG16, unpack_q6_k, token_g16<2, true>, token1_q6_k>(K / 256, group, act, as, n, out, os);
#endif
  (void)K, (void)group, (void)act, (void)as, (void)n, (void)out, (void)os;
  fail(std::string("no AVX2 X16 kernel for ") + dtype_name(t));
}

}  // namespace slake::simd
