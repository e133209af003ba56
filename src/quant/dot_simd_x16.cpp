// The K-quants' group kernel (AVX-512 VNNI): Q2_K..Q6_K and IQ4_XS matrices in the X16 layout
// (quant_dot.h), 16 rows x up to 4 tokens per call, one row per 32-bit lane. Each dpbusd meets 4
// quants of all 16 rows with the same 4 activation bytes, broadcast from memory, so a block costs a
// token 64 dpbusd and no unpacking per row, shuffle or horizontal sum; the quants are unpacked once
// per group and block for every token of the tile. The integer sums of a sub-block (32 elements)
// or group (16) are scaled by its scale in int32, and the mins and offsets (Q3_K's -4, Q6_K's
// -32, IQ4_XS's -128 of its shifted values) meet the activations' group sums (bsums) through
// dpwssd, two groups per instruction.
// Each token's block sum is exact in int32 and scaled once per block in fp32, so a token's result
// does not depend on the other tokens of the tile: decode and batches round alike.
#include <algorithm>

#include <string>

#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/error.h"
#include "slake/quant/quant_dot.h"

#if defined(SLAKE_SIMD_DOT) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SLAKE_X16_KERNEL 1
#endif

namespace slake {

#ifdef SLAKE_X16_KERNEL
namespace {

using simd::bcast32;
using simd::f16_lanes;
using simd::iq4_table512;
using simd::load512;
using simd::prefetch_block;

// 16 int32 lanes from 16 bytes, unsigned or signed.
inline __m512i u8_lanes(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512i i8_lanes(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline const ActBlockQ8_K& act_block(const uint8_t* act, size_t as, int j, int64_t b) {
  return reinterpret_cast<const ActBlockQ8_K*>(act + static_cast<size_t>(j) * as)[b];
}

// --- The fields of a group's block, as vectors of the 16 rows (quant_dot.h gives the layout) ---
// Shared by the tile kernels (decode and small batches) and the prompt path's unpacking.

inline __m512i int16_pair(__m512i low, __m512i high) {
  return _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(high, 16));
}

// Q4_K/Q5_K: the quants of qs word 8c+k, low nibbles (sub-block 2c, elements 64c+4k..) and high
// (sub-block 2c+1, elements 64c+32+4k..); Q5_K adds bit r of qh word k (sub-block r's fifth bit) at
// bit 4. Scale and min of sub-block r (6 bits each), the min in both int16 halves of a lane.
template <bool kFifthBit>
inline void q45_word(const uint8_t* g, int c, int k, __m512i& lo, __m512i& hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), fifth = _mm512_set1_epi8(0x10);
  const __m512i v = load512(g + 256 + 64 * (8 * c + k));
  lo = _mm512_and_si512(v, m4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  if (kFifthBit) {  // 16-bit shifts: the 0x10 mask drops what crosses a byte
    const __m512i h = load512(g + 256 + 2048 + 64 * k);
    const int rl = 2 * c, rh = 2 * c + 1;
    lo = _mm512_ternarylogic_epi32(lo, rl <= 4 ? _mm512_slli_epi16(h, 4 - rl) : _mm512_srli_epi16(h, rl - 4), fifth, 0xF8);
    hi = _mm512_ternarylogic_epi32(hi, rh <= 4 ? _mm512_slli_epi16(h, 4 - rh) : _mm512_srli_epi16(h, rh - 4), fifth, 0xF8);
  }
}
inline __m512i q45_scale(const uint8_t* g, int r) { return _mm512_and_si512(u8_lanes(g + 64 + 16 * r), _mm512_set1_epi32(63)); }
inline __m512i q45_min_pair(const uint8_t* g, int r) {
  const __m512i n = u8_lanes(g + 192 + 16 * (r / 2));
  const __m512i low = r % 2 ? _mm512_srli_epi32(n, 4) : _mm512_and_si512(n, _mm512_set1_epi32(15));
  const __m512i m = _mm512_or_si512(low, _mm512_slli_epi32(_mm512_srli_epi32(u8_lanes(g + 64 + 16 * r), 6), 4));
  return int16_pair(m, m);
}

// Q6_K: ql word k < 16 of half h: low nibbles elements 128h+4k.. (groups 8h + k/4), high nibbles
// 128h+64+4k.. (groups 8h+4 + k/4); their high bits are in qh word 8h + k % 8, for sub-blocks k / 8
// and 2 + k / 8 of the half. The int8 scale of group s.
inline __m512i q6_high_bits(__m512i h, int m) {
  const __m512i m30 = _mm512_set1_epi8(0x30);
  switch (m) {
    case 0: return _mm512_and_si512(_mm512_slli_epi16(h, 4), m30);
    case 1: return _mm512_and_si512(_mm512_slli_epi16(h, 2), m30);
    case 2: return _mm512_and_si512(h, m30);
    default: return _mm512_and_si512(_mm512_srli_epi16(h, 2), m30);
  }
}
inline void q6_word(const uint8_t* g, int h, int k, __m512i& lo, __m512i& hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v = load512(g + 288 + 64 * (16 * h + k)), hb = load512(g + 288 + 2048 + 64 * (8 * h + k % 8));
  lo = _mm512_or_si512(_mm512_and_si512(v, m4), q6_high_bits(hb, k / 8));
  hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), q6_high_bits(hb, 2 + k / 8));
}
inline __m512i q6_scale(const uint8_t* g, int s) { return i8_lanes(g + 32 + 16 * s); }

// Q2_K/Q3_K: element 128h+32m+4k+j is at bits 2m of byte j of qs word 8h+k (group 8h+2m+k/4);
// Q3_K's third bit is bit 4h+m of hmask word k. Q2_K's group byte: scale low, min high nibble.
inline __m512i two_bits(__m512i v, int m) { return _mm512_and_si512(_mm512_srli_epi16(v, 2 * m), _mm512_set1_epi8(3)); }
inline __m512i q2_quants(const uint8_t* g, int h, int m, int k) { return two_bits(load512(g + 320 + 64 * (8 * h + k)), m); }
inline __m512i q2_scale(const uint8_t* g, int s) { return _mm512_and_si512(u8_lanes(g + 64 + 16 * s), _mm512_set1_epi32(15)); }
inline __m512i q2_min(const uint8_t* g, int s) { return _mm512_srli_epi32(u8_lanes(g + 64 + 16 * s), 4); }
inline __m512i q3_quants(const uint8_t* g, int h, int m, int k) {
  const int r = 4 * h + m;
  const __m512i hm = load512(g + 224 + 64 * k);
  const __m512i hb = r >= 2 ? _mm512_srli_epi16(hm, r - 2) : _mm512_slli_epi16(hm, 2 - r);
  return _mm512_ternarylogic_epi32(two_bits(load512(g + 736 + 64 * (8 * h + k)), m), hb, _mm512_set1_epi8(4), 0xF8);
}
// The 16 signed scales (-32..31): low 4 bits per pair at 32, high 2 bits per quad at 160.
inline void q3_scales(const uint8_t* g, __m512i (&sc)[16]) {
  const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
  for (int p = 0; p < 8; ++p) {
    const __m512i low = u8_lanes(g + 32 + 16 * p), high = u8_lanes(g + 160 + 16 * (p / 2));
    for (int c = 0; c < 2; ++c) {
      const int s = 2 * p + c;
      const __m512i l4 = c ? _mm512_srli_epi32(low, 4) : _mm512_and_si512(low, m15);
      const __m512i h2 = _mm512_and_si512(_mm512_srli_epi32(high, 2 * (s % 4)), m3);
      sc[s] = _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), bias);
    }
  }
}

// IQ4_XS: the table's values + 128 (iq4_table512); sub-block r's signed scale (-32..31)
// from scales_l (word at 64) and scales_h (u16 at 32); qs word 4r+w: low nibbles elements 32r+4w..,
// high nibbles 32r+16+4w...
inline __m512i iq4_scale(const uint8_t* g, int r) {
  const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
  const __m512i l4 = _mm512_and_si512(_mm512_srli_epi32(load512(g + 64), 4 * r), _mm512_set1_epi32(15));
  const __m512i h2 = _mm512_and_si512(_mm512_srli_epi32(sh, 2 * r), _mm512_set1_epi32(3));
  return _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), _mm512_set1_epi32(32));
}
inline void iq4_word(const uint8_t* g, __m512i table, int r, int w, __m512i& lo, __m512i& hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v = load512(g + 128 + 64 * (4 * r + w));
  lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
  hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
}

// A block's sums into a token's accumulator: d ad isum - dm ad msum, the two apart in int32 where
// dm is d (kJoint) and in fp32 otherwise.
template <bool kJoint>
inline __m512 add_block(__m512 acc, __m512 d, __m512 dm, __m512i isum, __m512i msum, float act_d) {
  const __m512 ad = _mm512_set1_ps(act_d);
  if (kJoint) return _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(_mm512_sub_epi32(isum, msum)), acc);
  acc = _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(isum), acc);
  return _mm512_fnmadd_ps(_mm512_mul_ps(dm, ad), _mm512_cvtepi32_ps(msum), acc);
}

// --- Tile kernels: a block unpacked into registers for up to 4 tokens --------------------------

// The loop every tile kernel shares: per block, body(g, b, isum, msum) gives each token's integer
// sums, and add_block scales them (dm: dmin at 32 unless kJoint).
template <size_t kBlock, bool kJoint, int RN, class Body>
inline void tile_blocks(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os, Body body) {
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    // Into L2, 4 blocks ahead: into L1, 2 ahead, the prefetches themselves stalled decode on a Zen
    // 4 (slake-kernel-bench, one token: Q5_K 2.6x and Q6_K 2.0x slower on one thread, 2.0x and 1.5x
    // on two). Every line counts: one in 2 or 4 left Q3_K, Q5_K and Q6_K as slow as before.
    prefetch_block<kBlock, 4, true>(g);
    __m512i isum[RN], msum[RN];
    for (int j = 0; j < RN; ++j) isum[j] = msum[j] = _mm512_setzero_si512();
    body(g, b, isum, msum);
    const __m512 d = f16_lanes(g), dm = kJoint ? d : f16_lanes(g + 32);
    for (int j = 0; j < RN; ++j) acc[j] = add_block<kJoint>(acc[j], d, dm, isum[j], msum[j], act_block(act, as, j, b).d);
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, acc[j]);
}

// Q4_K and Q5_K: per block, sum_r sc(r) sum_e q a (sub-blocks r of 32) times d, less
// sum_r m(r) (bsum(2r) + bsum(2r+1)) times dmin. |sum| < 8 * 63 * 32 * 31 * 128 < 2^31.
template <bool kFifthBit, int RN>
void tile_x16_q4_q5_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * (kFifthBit ? 176 : 144);
  tile_blocks<kBlock, false, RN>(nb, group, act, as, out, os, [&](const uint8_t* g, int64_t b, __m512i (&isum)[RN], __m512i (&msum)[RN]) {
    for (int r = 0; r < 8; ++r) {
      const __m512i mm = q45_min_pair(g, r);
      for (int j = 0; j < RN; ++j) msum[j] = _mm512_dpwssd_epi32(msum[j], mm, bcast32(act_block(act, as, j, b).bsums + 2 * r));
    }
    for (int c = 0; c < 4; ++c) {  // chunks of 64: sub-blocks 2c (low nibbles) and 2c+1 (high)
      __m512i lo_sum[RN], hi_sum[RN];
      for (int j = 0; j < RN; ++j) lo_sum[j] = hi_sum[j] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        __m512i lo, hi;
        q45_word<kFifthBit>(g, c, k, lo, hi);
        for (int j = 0; j < RN; ++j) {
          const int8_t* qs = act_block(act, as, j, b).qs + 64 * c + 4 * k;
          lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, bcast32(qs));
          hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, bcast32(qs + 32));
        }
      }
      const __m512i sl = q45_scale(g, 2 * c), sh = q45_scale(g, 2 * c + 1);
      for (int j = 0; j < RN; ++j)
        isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[j], sl), _mm512_mullo_epi32(hi_sum[j], sh)));
    }
  });
}

// Q6_K: per block, d times sum_s sc(s) (sum_e u a - 32 bsum(s)) over groups s of 16, u = q + 32 in
// 0..63. |sum| < 16 * 128 * 16 * (63 + 32) * 128 < 2^31.
template <int RN>
void tile_x16_q6_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * 210;
  tile_blocks<kBlock, true, RN>(nb, group, act, as, out, os, [&](const uint8_t* g, int64_t b, __m512i (&isum)[RN], __m512i (&msum)[RN]) {
    for (int p = 0; p < 8; ++p) {  // 32 sc(2p), 32 sc(2p+1) as an int16 pair meet bsums 2p, 2p+1
      const __m512i pair = int16_pair(_mm512_slli_epi32(q6_scale(g, 2 * p), 5), _mm512_slli_epi32(q6_scale(g, 2 * p + 1), 5));
      for (int j = 0; j < RN; ++j) msum[j] = _mm512_dpwssd_epi32(msum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * p));
    }
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 4; ++q) {  // the 4 words of groups 8h+q and 8h+4+q
        __m512i lo_sum[RN], hi_sum[RN];
        for (int j = 0; j < RN; ++j) lo_sum[j] = hi_sum[j] = _mm512_setzero_si512();
        for (int k = 4 * q; k < 4 * q + 4; ++k) {
          __m512i lo, hi;
          q6_word(g, h, k, lo, hi);
          for (int j = 0; j < RN; ++j) {
            const int8_t* qs = act_block(act, as, j, b).qs + 128 * h + 4 * k;
            lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, bcast32(qs));
            hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, bcast32(qs + 64));
          }
        }
        const __m512i sl = q6_scale(g, 8 * h + q), sh = q6_scale(g, 8 * h + 4 + q);
        for (int j = 0; j < RN; ++j)
          isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[j], sl), _mm512_mullo_epi32(hi_sum[j], sh)));
      }
  });
}

// Q2_K (kThird false): per block, d sum_s sc(s) sum_e q a - dmin sum_s m(s) bsum(s) over groups s
// of 16. Q3_K (kThird): d sum_s sc(s) (sum_e u a - 4 bsum(s)), u = the 2 low bits | the hmask bit
// << 2 (0..7), sc(s) signed.
template <bool kThird, int RN>
void tile_x16_q2_q3_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * (kThird ? 110 : 84);
  tile_blocks<kBlock, kThird, RN>(nb, group, act, as, out, os, [&](const uint8_t* g, int64_t b, __m512i (&isum)[RN], __m512i (&msum)[RN]) {
    __m512i sc[16];
    if (kThird) q3_scales(g, sc);
    else
      for (int s = 0; s < 16; ++s) sc[s] = q2_scale(g, s);
    for (int p = 0; p < 8; ++p) {
      const __m512i pair = kThird ? int16_pair(_mm512_slli_epi32(sc[2 * p], 2), _mm512_slli_epi32(sc[2 * p + 1], 2))
                                  : int16_pair(q2_min(g, 2 * p), q2_min(g, 2 * p + 1));
      for (int j = 0; j < RN; ++j) msum[j] = _mm512_dpwssd_epi32(msum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * p));
    }
    for (int h = 0; h < 2; ++h)
      for (int m = 0; m < 4; ++m)
        for (int q = 0; q < 2; ++q) {
          __m512i sum[RN];
          for (int j = 0; j < RN; ++j) sum[j] = _mm512_setzero_si512();
          for (int k = 4 * q; k < 4 * q + 4; ++k) {
            const __m512i u = kThird ? q3_quants(g, h, m, k) : q2_quants(g, h, m, k);
            for (int j = 0; j < RN; ++j)
              sum[j] = _mm512_dpbusd_epi32(sum[j], u, bcast32(act_block(act, as, j, b).qs + 128 * h + 32 * m + 4 * k));
          }
          for (int j = 0; j < RN; ++j) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sum[j], sc[8 * h + 2 * m + q]));
        }
  });
}

// IQ4_XS: per block, d sum_r sc(r) sum_e v a over sub-blocks r of 32, v = kIQ4Values[nibble], taken
// as v + 128 (unsigned, for dpbusd) less 128 times the activation sums.
template <int RN>
void tile_x16_iq4_xs(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * 136;
  const __m512i table = iq4_table512();
  tile_blocks<kBlock, true, RN>(nb, group, act, as, out, os, [&](const uint8_t* g, int64_t b, __m512i (&isum)[RN], __m512i (&msum)[RN]) {
    for (int r = 0; r < 8; ++r) {
      const __m512i sc = iq4_scale(g, r), mo = _mm512_slli_epi32(sc, 7), pair = int16_pair(mo, mo);
      __m512i sum[RN];
      for (int j = 0; j < RN; ++j) {
        sum[j] = _mm512_setzero_si512();
        msum[j] = _mm512_dpwssd_epi32(msum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * r));
      }
      for (int w = 0; w < 4; ++w) {
        __m512i lo, hi;
        iq4_word(g, table, r, w, lo, hi);
        for (int j = 0; j < RN; ++j) {
          const int8_t* qs = act_block(act, as, j, b).qs + 32 * r + 4 * w;
          sum[j] = _mm512_dpbusd_epi32(sum[j], lo, bcast32(qs));
          sum[j] = _mm512_dpbusd_epi32(sum[j], hi, bcast32(qs + 16));
        }
      }
      for (int j = 0; j < RN; ++j) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sum[j], sc));
    }
  });
}

// --- Prompts: each block unpacked once for every token -------------------------------------------
// One block of a group as plain unsigned 8-bit quants: vector w holds elements 4w..4w+3 of the 16
// rows; per group s of 16 elements, each row's int32 scale; per pair p of groups, the int16
// weights (low: group 2p, high: 2p+1) of the activations' group sums; and the fp32 factors. The
// integer sums are the tile kernels' and add_block the same fp32 steps, so the results are equal
// bit for bit.
struct Unpacked {
  __m512i u[64];
  __m512i sc[16];
  __m512i mo[8];
  __m512 d, dm;
  bool joint;
};

template <bool kFifthBit>
void unpack_q4_q5_k(const uint8_t* g, Unpacked& U) {
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 8; ++k) q45_word<kFifthBit>(g, c, k, U.u[16 * c + k], U.u[16 * c + 8 + k]);
  for (int r = 0; r < 8; ++r) {
    U.sc[2 * r] = U.sc[2 * r + 1] = q45_scale(g, r);
    U.mo[r] = q45_min_pair(g, r);
  }
  U.d = f16_lanes(g);
  U.dm = f16_lanes(g + 32);
  U.joint = false;
}

void unpack_q6_k(const uint8_t* g, Unpacked& U) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) q6_word(g, h, k, U.u[32 * h + k], U.u[32 * h + 16 + k]);
  for (int s = 0; s < 16; ++s) U.sc[s] = q6_scale(g, s);
  for (int p = 0; p < 8; ++p) U.mo[p] = int16_pair(_mm512_slli_epi32(U.sc[2 * p], 5), _mm512_slli_epi32(U.sc[2 * p + 1], 5));
  U.d = U.dm = f16_lanes(g);
  U.joint = true;
}

template <bool kThird>
void unpack_q2_q3_k(const uint8_t* g, Unpacked& U) {
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 4; ++m)
      for (int k = 0; k < 8; ++k) U.u[32 * h + 8 * m + k] = kThird ? q3_quants(g, h, m, k) : q2_quants(g, h, m, k);
  if (kThird) q3_scales(g, U.sc);
  else
    for (int s = 0; s < 16; ++s) U.sc[s] = q2_scale(g, s);
  for (int p = 0; p < 8; ++p)
    U.mo[p] = kThird ? int16_pair(_mm512_slli_epi32(U.sc[2 * p], 2), _mm512_slli_epi32(U.sc[2 * p + 1], 2))
                     : int16_pair(q2_min(g, 2 * p), q2_min(g, 2 * p + 1));
  U.d = f16_lanes(g);
  U.dm = kThird ? U.d : f16_lanes(g + 32);
  U.joint = kThird;
}

void unpack_iq4_xs(const uint8_t* g, Unpacked& U) {
  const __m512i table = iq4_table512();
  for (int r = 0; r < 8; ++r) {
    U.sc[2 * r] = U.sc[2 * r + 1] = iq4_scale(g, r);
    const __m512i mo = _mm512_slli_epi32(U.sc[2 * r], 7);
    U.mo[r] = int16_pair(mo, mo);
    for (int w = 0; w < 4; ++w) iq4_word(g, table, r, w, U.u[8 * r + w], U.u[8 * r + 4 + w]);
  }
  U.d = U.dm = f16_lanes(g);
  U.joint = true;
}

// Block b's contribution for RN tokens, added to out[j * os]; kScaleElems 32 where the scales
// come per 32 elements (Q4_K, Q5_K, IQ4_XS: sc(2r) = sc(2r+1)), one product per sub-block.
template <int kScaleElems, int RN>
void dot_unpacked(const Unpacked& U, int64_t b, const uint8_t* act, size_t as, float* out, int64_t os) {
  __m512i isum[RN], msum[RN];
  for (int j = 0; j < RN; ++j) isum[j] = msum[j] = _mm512_setzero_si512();
  for (int p = 0; p < 8; ++p)
    for (int j = 0; j < RN; ++j) msum[j] = _mm512_dpwssd_epi32(msum[j], U.mo[p], bcast32(act_block(act, as, j, b).bsums + 2 * p));
  const int8_t* qs[RN];
  for (int j = 0; j < RN; ++j) qs[j] = act_block(act, as, j, b).qs;
  constexpr int kWords = kScaleElems / 4;  // the vectors one scale covers
#pragma GCC unroll 16
  for (int s = 0; s < 256 / kScaleElems; ++s) {
    __m512i sum[RN];
#pragma GCC unroll 4
    for (int j = 0; j < RN; ++j) sum[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int q = 0; q < kWords; ++q) {
      const __m512i u = U.u[kWords * s + q];
#pragma GCC unroll 4
      for (int j = 0; j < RN; ++j) sum[j] = _mm512_dpbusd_epi32(sum[j], u, bcast32(qs[j] + kScaleElems * s + 4 * q));
    }
#pragma GCC unroll 4
    for (int j = 0; j < RN; ++j) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sum[j], U.sc[kScaleElems / 16 * s]));
  }
  for (int j = 0; j < RN; ++j) {
    const __m512 acc = _mm512_loadu_ps(out + j * os);
    const float ad = act_block(act, as, j, b).d;
    _mm512_storeu_ps(out + j * os, U.joint ? add_block<true>(acc, U.d, U.dm, isum[j], msum[j], ad)
                                           : add_block<false>(acc, U.d, U.dm, isum[j], msum[j], ad));
  }
}

template <int kScaleElems>
void tokens_over(const Unpacked& U, int64_t b, const uint8_t* act, size_t as, int64_t n, float* out, int64_t os) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) dot_unpacked<kScaleElems, 4>(U, b, act + static_cast<size_t>(j) * as, as, out + j * os, os);
  switch (n - j) {
    case 3: return dot_unpacked<kScaleElems, 3>(U, b, act + static_cast<size_t>(j) * as, as, out + j * os, os);
    case 2: return dot_unpacked<kScaleElems, 2>(U, b, act + static_cast<size_t>(j) * as, as, out + j * os, os);
    case 1: return dot_unpacked<kScaleElems, 1>(U, b, act + static_cast<size_t>(j) * as, as, out + j * os, os);
    default: return;
  }
}

void group_x16(DType t, int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, int64_t n, float* out, int64_t os) {
  const size_t block = kGroupRowsX16 * static_cast<size_t>(dtype_info(t).block_bytes);
  for (int64_t j = 0; j < n; ++j) _mm512_storeu_ps(out + j * os, _mm512_setzero_ps());
  Unpacked U;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * block;
    switch (t) {
      case DType::Q2_K: unpack_q2_q3_k<false>(g, U); break;
      case DType::Q3_K: unpack_q2_q3_k<true>(g, U); break;
      case DType::Q4_K: unpack_q4_q5_k<false>(g, U); break;
      case DType::Q5_K: unpack_q4_q5_k<true>(g, U); break;
      case DType::Q6_K: unpack_q6_k(g, U); break;
      case DType::IQ4_XS: unpack_iq4_xs(g, U); break;
      default: fail(std::string("no X16 kernel for ") + dtype_name(t));
    }
    if (t == DType::Q4_K || t == DType::Q5_K || t == DType::IQ4_XS) tokens_over<32>(U, b, act, as, n, out, os);
    else tokens_over<16>(U, b, act, as, n, out, os);
  }
}

template <int RN>
void tile_x16(DType t, int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  switch (t) {
    case DType::Q2_K: return tile_x16_q2_q3_k<false, RN>(nb, group, act, as, out, os);
    case DType::Q3_K: return tile_x16_q2_q3_k<true, RN>(nb, group, act, as, out, os);
    case DType::Q4_K: return tile_x16_q4_q5_k<false, RN>(nb, group, act, as, out, os);
    case DType::Q5_K: return tile_x16_q4_q5_k<true, RN>(nb, group, act, as, out, os);
    case DType::Q6_K: return tile_x16_q6_k<RN>(nb, group, act, as, out, os);
    case DType::IQ4_XS: return tile_x16_iq4_xs<RN>(nb, group, act, as, out, os);
    default: fail(std::string("no X16 kernel for ") + dtype_name(t));
  }
}

}  // namespace
#endif

void dot_tile_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                  int64_t out_stride) {
#ifdef SLAKE_X16_KERNEL
  if (x16_block32_type(t)) return simd::tile_x16_block32(t, K, group, act, act_stride, rn, out, out_stride);
  const int64_t nb = K / 256;
  switch (rn) {
    case 1: return tile_x16<1>(t, nb, group, act, act_stride, out, out_stride);
    case 2: return tile_x16<2>(t, nb, group, act, act_stride, out, out_stride);
    case 3: return tile_x16<3>(t, nb, group, act, act_stride, out, out_stride);
    default: return tile_x16<4>(t, nb, group, act, act_stride, out, out_stride);
  }
#else
  if (simd::x16_avx2_type(t)) return simd::group_x16_avx2(t, K, group, act, act_stride, rn, out, out_stride);
  portable::dot_tile_x16(t, K, group, act, act_stride, rn, out, out_stride);
#endif
}

void dot_group_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int64_t n, float* out,
                   int64_t out_stride) {
#ifdef SLAKE_X16_KERNEL
  if (x16_block32_type(t)) return simd::group_x16_block32(t, K, group, act, act_stride, n, out, out_stride);
  group_x16(t, K / 256, group, act, act_stride, n, out, out_stride);
#else
  if (simd::x16_avx2_type(t)) return simd::group_x16_avx2(t, K, group, act, act_stride, n, out, out_stride);
  for (int64_t j = 0; j < n; j += kTileTokens)
    dot_tile_x16(t, K, group, act + static_cast<size_t>(j) * act_stride, act_stride,
                 static_cast<int>(std::min<int64_t>(kTileTokens, n - j)), out + j * out_stride, out_stride);
#endif
}

bool x16_kernel_available(DType t) {
#ifdef SLAKE_X16_KERNEL
  return x16_type(t);
#else
  return simd::x16_avx2_type(t);
#endif
}

bool x16_unpack_for_prompts(DType t) {
#ifdef SLAKE_X16_KERNEL
  return t == DType::Q3_K || t == DType::Q5_K || t == DType::Q6_K || x16_block32_type(t);
#else
  return simd::x16_avx2_type(t);
#endif
}

}  // namespace slake
