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
#include <cstring>

#include <string>

#include "simd_util.h"
#include "slake/error.h"
#include "slake/quant/quant_dot.h"

#if defined(SLAKE_SIMD_DOT) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SLAKE_X16_KERNEL 1
#endif

namespace slake {

#ifdef SLAKE_X16_KERNEL
namespace {

inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// 16 int32 lanes from 16 bytes, unsigned or signed.
inline __m512i u8_lanes(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512i i8_lanes(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512 f16_lanes(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Every cache line of the block kAhead blocks on: a group is one stream of 2.3-3.4 KB blocks that
// the hardware prefetchers alone leave waiting on memory (Q6_K decode ran at a third of the rows
// kernel's speed with one line per block).
constexpr int kAhead = 2;
template <size_t kBlock>
inline void prefetch_block(const uint8_t* g) {
  for (size_t off = 0; off < kBlock; off += 64) _mm_prefetch(reinterpret_cast<const char*>(g + kAhead * kBlock + off), _MM_HINT_T0);
}

inline const ActBlockQ8_K& act_block(const uint8_t* act, size_t as, int j, int64_t b) {
  return reinterpret_cast<const ActBlockQ8_K*>(act + static_cast<size_t>(j) * as)[b];
}

// Q4_K and Q5_K: per block, sum_r sc(r) sum_e q a (sub-blocks r of 32) times d, less
// sum_r m(r) (bsum(2r) + bsum(2r+1)) times dmin. |sum| < 8 * 63 * 32 * 31 * 128 < 2^31.
template <bool kFifthBit, int RN>
void tile_x16_q4_q5_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * (kFifthBit ? 176 : 144), kQs = 256, kQh = 256 + 2048;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m63 = _mm512_set1_epi32(63), fifth = _mm512_set1_epi8(0x10);
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    prefetch_block<kBlock>(g);
    __m512i isum[RN], msum[RN];
    for (int j = 0; j < RN; ++j) isum[j] = msum[j] = _mm512_setzero_si512();
    // The mins: m(r) in both int16 halves of a lane meets bsums 2r and 2r+1 in one dpwssd.
    for (int p = 0; p < 4; ++p) {
      const __m512i n = u8_lanes(g + 192 + 16 * p);
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * p + h;
        const __m512i high = _mm512_slli_epi32(_mm512_srli_epi32(u8_lanes(g + 64 + 16 * r), 6), 4);
        const __m512i m = _mm512_or_si512(h ? _mm512_srli_epi32(n, 4) : _mm512_and_si512(n, _mm512_set1_epi32(15)), high);
        const __m512i mm = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
        for (int j = 0; j < RN; ++j) msum[j] = _mm512_dpwssd_epi32(msum[j], mm, bcast32(act_block(act, as, j, b).bsums + 2 * r));
      }
    }
    for (int c = 0; c < 4; ++c) {  // chunks of 64: sub-blocks 2c (low nibbles) and 2c+1 (high)
      __m512i lo_sum[RN], hi_sum[RN];
      for (int j = 0; j < RN; ++j) lo_sum[j] = hi_sum[j] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        const __m512i v = load512(g + kQs + 64 * (8 * c + k));
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (kFifthBit) {  // bit r of each byte is sub-block r's fifth bit, moved to bit 4
          const __m512i h = load512(g + kQh + 64 * k);
          const int rl = 2 * c, rh = 2 * c + 1;
          const __m512i bl = rl <= 4 ? _mm512_slli_epi16(h, 4 - rl) : _mm512_srli_epi16(h, rl - 4);
          const __m512i bh = rh <= 4 ? _mm512_slli_epi16(h, 4 - rh) : _mm512_srli_epi16(h, rh - 4);
          lo = _mm512_ternarylogic_epi32(lo, bl, fifth, 0xF8);  // lo | (bl & fifth)
          hi = _mm512_ternarylogic_epi32(hi, bh, fifth, 0xF8);
        }
        for (int j = 0; j < RN; ++j) {
          const int8_t* qs = act_block(act, as, j, b).qs + 64 * c + 4 * k;
          lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, bcast32(qs));
          hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, bcast32(qs + 32));
        }
      }
      const __m512i sl = _mm512_and_si512(u8_lanes(g + 64 + 16 * (2 * c)), m63);
      const __m512i sh = _mm512_and_si512(u8_lanes(g + 64 + 16 * (2 * c + 1)), m63);
      for (int j = 0; j < RN; ++j)
        isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[j], sl), _mm512_mullo_epi32(hi_sum[j], sh)));
    }
    const __m512 d = f16_lanes(g), dmin = f16_lanes(g + 32);
    for (int j = 0; j < RN; ++j) {
      const __m512 ad = _mm512_set1_ps(act_block(act, as, j, b).d);
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(isum[j]), acc[j]);
      acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, ad), _mm512_cvtepi32_ps(msum[j]), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, acc[j]);
}

// Q6_K: per block, d times sum_s sc(s) (sum_e u a - 32 bsum(s)) over groups s of 16, u = q + 32 in
// 0..63. |sum| < 16 * 128 * 16 * (63 + 32) * 128 < 2^31.
template <int RN>
void tile_x16_q6_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * 210, kQl = 288, kQh = 288 + 2048;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), low16 = _mm512_set1_epi32(0xFFFF);
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  // The high bits of sub-block m < 4 of a half at bits 4, 5.
  const auto high_bits = [&](__m512i h, int m) {
    switch (m) {
      case 0: return _mm512_and_si512(_mm512_slli_epi16(h, 4), m30);
      case 1: return _mm512_and_si512(_mm512_slli_epi16(h, 2), m30);
      case 2: return _mm512_and_si512(h, m30);
      default: return _mm512_and_si512(_mm512_srli_epi16(h, 2), m30);
    }
  };
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    prefetch_block<kBlock>(g);
    __m512i isum[RN], osum[RN];
    for (int j = 0; j < RN; ++j) isum[j] = osum[j] = _mm512_setzero_si512();
    // The offset: scales of groups 2p and 2p+1 as an int16 pair meet bsums 2p and 2p+1.
    for (int p = 0; p < 8; ++p) {
      const __m512i pair = _mm512_or_si512(_mm512_and_si512(i8_lanes(g + 32 + 16 * (2 * p)), low16),
                                           _mm512_slli_epi32(i8_lanes(g + 32 + 16 * (2 * p + 1)), 16));
      for (int j = 0; j < RN; ++j) osum[j] = _mm512_dpwssd_epi32(osum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * p));
    }
    // Per half h of 128 elements, word k < 16 of ql holds elements 128h+4k.. (low nibbles: groups
    // 8h + k/4) and 128h+64+4k.. (high nibbles: groups 8h+4 + k/4); word k % 8 of the half's qh
    // holds their high bits, for sub-block k / 8 and 2 + k / 8 of the half.
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 4; ++q) {  // the 4 words of groups 8h+q and 8h+4+q
        __m512i lo_sum[RN], hi_sum[RN];
        for (int j = 0; j < RN; ++j) lo_sum[j] = hi_sum[j] = _mm512_setzero_si512();
        for (int k = 4 * q; k < 4 * q + 4; ++k) {
          const __m512i v = load512(g + kQl + 64 * (16 * h + k));
          const __m512i hb = load512(g + kQh + 64 * (8 * h + k % 8));
          const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), high_bits(hb, k / 8));
          const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), high_bits(hb, 2 + k / 8));
          for (int j = 0; j < RN; ++j) {
            const int8_t* qs = act_block(act, as, j, b).qs + 128 * h + 4 * k;
            lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, bcast32(qs));
            hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, bcast32(qs + 64));
          }
        }
        const __m512i sl = i8_lanes(g + 32 + 16 * (8 * h + q)), sh = i8_lanes(g + 32 + 16 * (8 * h + 4 + q));
        for (int j = 0; j < RN; ++j)
          isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[j], sl), _mm512_mullo_epi32(hi_sum[j], sh)));
      }
    const __m512 d = f16_lanes(g);
    for (int j = 0; j < RN; ++j) {
      const __m512i total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(osum[j], 5));
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(act_block(act, as, j, b).d)), _mm512_cvtepi32_ps(total), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, acc[j]);
}

// The 2 bits of sub-block m < 4 of a half (Q2_K, Q3_K's low bits): qs word bits 2m, 2m+1.
inline __m512i two_bits(__m512i v, int m) { return _mm512_and_si512(_mm512_srli_epi16(v, 2 * m), _mm512_set1_epi8(3)); }

// Q2_K: per block, d sum_s sc(s) sum_e q a - dmin sum_s m(s) bsum(s) over groups s of 16, the
// scale the low and the min the high nibble of a byte. Element 128h+32m+4k+j is at bits 2m of
// byte j of qs word 8h+k (group 8h+2m+k/4).
template <int RN>
void tile_x16_q2_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * 84, kSc = 64, kQs = 320;
  const __m512i m15 = _mm512_set1_epi32(15);
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    prefetch_block<kBlock>(g);
    __m512i isum[RN], msum[RN];
    for (int j = 0; j < RN; ++j) isum[j] = msum[j] = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      const __m512i pair = _mm512_or_si512(_mm512_srli_epi32(u8_lanes(g + kSc + 16 * (2 * p)), 4),
                                           _mm512_slli_epi32(_mm512_srli_epi32(u8_lanes(g + kSc + 16 * (2 * p + 1)), 4), 16));
      for (int j = 0; j < RN; ++j) msum[j] = _mm512_dpwssd_epi32(msum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * p));
    }
    for (int h = 0; h < 2; ++h)
      for (int m = 0; m < 4; ++m)
        for (int q = 0; q < 2; ++q) {
          __m512i sum[RN];
          for (int j = 0; j < RN; ++j) sum[j] = _mm512_setzero_si512();
          for (int k = 4 * q; k < 4 * q + 4; ++k) {
            const __m512i u = two_bits(load512(g + kQs + 64 * (8 * h + k)), m);
            for (int j = 0; j < RN; ++j)
              sum[j] = _mm512_dpbusd_epi32(sum[j], u, bcast32(act_block(act, as, j, b).qs + 128 * h + 32 * m + 4 * k));
          }
          const __m512i sc = _mm512_and_si512(u8_lanes(g + kSc + 16 * (8 * h + 2 * m + q)), m15);
          for (int j = 0; j < RN; ++j) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sum[j], sc));
        }
    const __m512 d = f16_lanes(g), dmin = f16_lanes(g + 32);
    for (int j = 0; j < RN; ++j) {
      const __m512 ad = _mm512_set1_ps(act_block(act, as, j, b).d);
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(isum[j]), acc[j]);
      acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, ad), _mm512_cvtepi32_ps(msum[j]), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, acc[j]);
}

// Q3_K: per block, d sum_s sc(s) (sum_e u a - 4 bsum(s)), u = the 2 low bits (as Q2_K's) | the
// hmask bit << 2 (0..7), sc(s) = the stored 6 bits - 32. Element 32r+4k+j's hmask bit is bit r
// of byte j of hmask word k.
template <int RN>
void tile_x16_q3_k(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * 110, kLow = 32, kHigh = 160, kHm = 224, kQs = 736;
  const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), b2 = _mm512_set1_epi8(4);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF), bias = _mm512_set1_epi32(32);
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    prefetch_block<kBlock>(g);
    __m512i sc[16];
    for (int p = 0; p < 8; ++p) {
      const __m512i low = u8_lanes(g + kLow + 16 * p), high = u8_lanes(g + kHigh + 16 * (p / 2));
      for (int c = 0; c < 2; ++c) {
        const int s = 2 * p + c;
        const __m512i l4 = c ? _mm512_srli_epi32(low, 4) : _mm512_and_si512(low, m15);
        const __m512i h2 = _mm512_and_si512(_mm512_srli_epi32(high, 2 * (s % 4)), m3);
        sc[s] = _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), bias);
      }
    }
    __m512i isum[RN], osum[RN];
    for (int j = 0; j < RN; ++j) isum[j] = osum[j] = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      const __m512i pair = _mm512_or_si512(_mm512_and_si512(sc[2 * p], low16), _mm512_slli_epi32(sc[2 * p + 1], 16));
      for (int j = 0; j < RN; ++j) osum[j] = _mm512_dpwssd_epi32(osum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * p));
    }
    for (int h = 0; h < 2; ++h)
      for (int m = 0; m < 4; ++m) {
        const int r = 4 * h + m;  // the hmask bit
        for (int q = 0; q < 2; ++q) {
          __m512i sum[RN];
          for (int j = 0; j < RN; ++j) sum[j] = _mm512_setzero_si512();
          for (int k = 4 * q; k < 4 * q + 4; ++k) {
            const __m512i hm = load512(g + kHm + 64 * k);
            const __m512i hb = r >= 2 ? _mm512_srli_epi16(hm, r - 2) : _mm512_slli_epi16(hm, 2 - r);
            const __m512i u = _mm512_ternarylogic_epi32(two_bits(load512(g + kQs + 64 * (8 * h + k)), m), hb, b2, 0xF8);
            for (int j = 0; j < RN; ++j)
              sum[j] = _mm512_dpbusd_epi32(sum[j], u, bcast32(act_block(act, as, j, b).qs + 128 * h + 32 * m + 4 * k));
          }
          for (int j = 0; j < RN; ++j) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sum[j], sc[8 * h + 2 * m + q]));
        }
      }
    const __m512 d = f16_lanes(g);
    for (int j = 0; j < RN; ++j) {
      const __m512i total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(osum[j], 2));
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(act_block(act, as, j, b).d)), _mm512_cvtepi32_ps(total), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, acc[j]);
}

// IQ4_XS: per block, d sum_r sc(r) sum_e v a over sub-blocks r of 32, v = kIQ4Values[nibble], taken
// as v + 128 (unsigned, for dpbusd) less 128 times the activation sums. Sub-block r's 16 bytes are
// qs words 4r..4r+3: low nibbles elements 32r+4w'+j, high nibbles 32r+16+4w'+j (w' = w % 4).
template <int RN>
void tile_x16_iq4_xs(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  constexpr size_t kBlock = 16 * 136, kSh = 32, kSl = 64, kQs = 128;
  alignas(16) uint8_t shifted[16];
  for (int i = 0; i < 16; ++i) shifted[i] = static_cast<uint8_t>(quant::kIQ4Values[i] + 128);
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted)));
  const __m512i m4 = _mm512_set1_epi8(0x0F), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
  const __m512i bias = _mm512_set1_epi32(32);
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + static_cast<size_t>(b) * kBlock;
    prefetch_block<kBlock>(g);
    const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kSh)));
    const __m512i sl = load512(g + kSl);
    __m512i isum[RN], osum[RN];
    for (int j = 0; j < RN; ++j) isum[j] = osum[j] = _mm512_setzero_si512();
    for (int r = 0; r < 8; ++r) {
      const __m512i l4 = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * r), m15);
      const __m512i h2 = _mm512_and_si512(_mm512_srli_epi32(sh, 2 * r), m3);
      const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), bias);
      const __m512i pair = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(sc, 16));
      __m512i sum[RN];
      for (int j = 0; j < RN; ++j) {
        sum[j] = _mm512_setzero_si512();
        osum[j] = _mm512_dpwssd_epi32(osum[j], pair, bcast32(act_block(act, as, j, b).bsums + 2 * r));
      }
      for (int w = 0; w < 4; ++w) {
        const __m512i v = load512(g + kQs + 64 * (4 * r + w));
        const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
        const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        for (int j = 0; j < RN; ++j) {
          const int8_t* qs = act_block(act, as, j, b).qs + 32 * r + 4 * w;
          sum[j] = _mm512_dpbusd_epi32(sum[j], lo, bcast32(qs));
          sum[j] = _mm512_dpbusd_epi32(sum[j], hi, bcast32(qs + 16));
        }
      }
      for (int j = 0; j < RN; ++j) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sum[j], sc));
    }
    const __m512 d = f16_lanes(g);
    for (int j = 0; j < RN; ++j) {
      const __m512i total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(osum[j], 7));
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(act_block(act, as, j, b).d)), _mm512_cvtepi32_ps(total), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, acc[j]);
}

// --- Prompts: each block unpacked once for every token -------------------------------------------
// One block of a group as plain unsigned 8-bit quants: vector w holds elements 4w..4w+3 of the 16
// rows; per group s of 16 elements, each row's int32 scale; per pair p of groups, the int16
// weights (low: group 2p, high: 2p+1) of the activations' group sums; and the fp32 factors. A
// token's block sum is d ad sum_s sc(s) sum_e u a - dm ad sum_s mo(s) bsum(s), the two terms
// taken apart in int32 where dm is d (`joint`: Q3_K's 4 sc, Q6_K's 32 sc, IQ4_XS's 128 sc) and in
// fp32 otherwise (dmin), exactly as the tile kernels above take them: the integer sums are the
// same integers, and the fp32 steps the same, so the results are equal bit for bit.
struct Unpacked {
  __m512i u[64];
  __m512i sc[16];
  __m512i mo[8];
  __m512 d, dm;
  bool joint;
};

inline __m512i int16_pair(__m512i low, __m512i high) {
  return _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(high, 16));
}

template <bool kFifthBit>
void unpack_q4_q5_k(const uint8_t* g, Unpacked& U) {
  constexpr size_t kQs = 256, kQh = 256 + 2048;
  const __m512i m4 = _mm512_set1_epi8(0x0F), fifth = _mm512_set1_epi8(0x10), m63 = _mm512_set1_epi32(63);
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 8; ++k) {
      const __m512i v = load512(g + kQs + 64 * (8 * c + k));
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if (kFifthBit) {
        const __m512i h = load512(g + kQh + 64 * k);
        const int rl = 2 * c, rh = 2 * c + 1;
        lo = _mm512_ternarylogic_epi32(lo, rl <= 4 ? _mm512_slli_epi16(h, 4 - rl) : _mm512_srli_epi16(h, rl - 4), fifth, 0xF8);
        hi = _mm512_ternarylogic_epi32(hi, rh <= 4 ? _mm512_slli_epi16(h, 4 - rh) : _mm512_srli_epi16(h, rh - 4), fifth, 0xF8);
      }
      U.u[16 * c + k] = lo;
      U.u[16 * c + 8 + k] = hi;
    }
  for (int p = 0; p < 4; ++p) {
    const __m512i n = u8_lanes(g + 192 + 16 * p);
    for (int h = 0; h < 2; ++h) {
      const int r = 2 * p + h;
      const __m512i sb = u8_lanes(g + 64 + 16 * r);
      U.sc[2 * r] = U.sc[2 * r + 1] = _mm512_and_si512(sb, m63);
      const __m512i m = _mm512_or_si512(h ? _mm512_srli_epi32(n, 4) : _mm512_and_si512(n, _mm512_set1_epi32(15)),
                                        _mm512_slli_epi32(_mm512_srli_epi32(sb, 6), 4));
      U.mo[r] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
    }
  }
  U.d = f16_lanes(g);
  U.dm = f16_lanes(g + 32);
  U.joint = false;
}

void unpack_q6_k(const uint8_t* g, Unpacked& U) {
  constexpr size_t kQl = 288, kQh = 288 + 2048;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const auto high_bits = [&](__m512i h, int m) {
    switch (m) {
      case 0: return _mm512_and_si512(_mm512_slli_epi16(h, 4), m30);
      case 1: return _mm512_and_si512(_mm512_slli_epi16(h, 2), m30);
      case 2: return _mm512_and_si512(h, m30);
      default: return _mm512_and_si512(_mm512_srli_epi16(h, 2), m30);
    }
  };
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) {
      const __m512i v = load512(g + kQl + 64 * (16 * h + k)), hb = load512(g + kQh + 64 * (8 * h + k % 8));
      U.u[32 * h + k] = _mm512_or_si512(_mm512_and_si512(v, m4), high_bits(hb, k / 8));
      U.u[32 * h + 16 + k] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), high_bits(hb, 2 + k / 8));
    }
  for (int s = 0; s < 16; ++s) U.sc[s] = i8_lanes(g + 32 + 16 * s);
  for (int p = 0; p < 8; ++p) U.mo[p] = int16_pair(_mm512_slli_epi32(U.sc[2 * p], 5), _mm512_slli_epi32(U.sc[2 * p + 1], 5));
  U.d = U.dm = f16_lanes(g);
  U.joint = true;
}

void unpack_q2_k(const uint8_t* g, Unpacked& U) {
  constexpr size_t kSc = 64, kQs = 320;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 8; ++k) {
      const __m512i v = load512(g + kQs + 64 * (8 * h + k));
      for (int m = 0; m < 4; ++m) U.u[32 * h + 8 * m + k] = two_bits(v, m);
    }
  for (int s = 0; s < 16; ++s) U.sc[s] = _mm512_and_si512(u8_lanes(g + kSc + 16 * s), _mm512_set1_epi32(15));
  for (int p = 0; p < 8; ++p)
    U.mo[p] = int16_pair(_mm512_srli_epi32(u8_lanes(g + kSc + 16 * (2 * p)), 4), _mm512_srli_epi32(u8_lanes(g + kSc + 16 * (2 * p + 1)), 4));
  U.d = f16_lanes(g);
  U.dm = f16_lanes(g + 32);
  U.joint = false;
}

void unpack_q3_k(const uint8_t* g, Unpacked& U) {
  constexpr size_t kLow = 32, kHigh = 160, kHm = 224, kQs = 736;
  const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), b2 = _mm512_set1_epi8(4), bias = _mm512_set1_epi32(32);
  for (int p = 0; p < 8; ++p) {
    const __m512i low = u8_lanes(g + kLow + 16 * p), high = u8_lanes(g + kHigh + 16 * (p / 2));
    for (int c = 0; c < 2; ++c) {
      const int s = 2 * p + c;
      const __m512i l4 = c ? _mm512_srli_epi32(low, 4) : _mm512_and_si512(low, m15);
      const __m512i h2 = _mm512_and_si512(_mm512_srli_epi32(high, 2 * (s % 4)), m3);
      U.sc[s] = _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), bias);
    }
  }
  for (int p = 0; p < 8; ++p) U.mo[p] = int16_pair(_mm512_slli_epi32(U.sc[2 * p], 2), _mm512_slli_epi32(U.sc[2 * p + 1], 2));
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 4; ++m) {
      const int r = 4 * h + m;
      for (int k = 0; k < 8; ++k) {
        const __m512i hm = load512(g + kHm + 64 * k);
        const __m512i hb = r >= 2 ? _mm512_srli_epi16(hm, r - 2) : _mm512_slli_epi16(hm, 2 - r);
        U.u[32 * h + 8 * m + k] = _mm512_ternarylogic_epi32(two_bits(load512(g + kQs + 64 * (8 * h + k)), m), hb, b2, 0xF8);
      }
    }
  U.d = U.dm = f16_lanes(g);
  U.joint = true;
}

void unpack_iq4_xs(const uint8_t* g, Unpacked& U) {
  constexpr size_t kSh = 32, kSl = 64, kQs = 128;
  alignas(16) uint8_t shifted[16];
  for (int i = 0; i < 16; ++i) shifted[i] = static_cast<uint8_t>(quant::kIQ4Values[i] + 128);
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted)));
  const __m512i m4 = _mm512_set1_epi8(0x0F), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
  const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kSh)));
  const __m512i sl = load512(g + kSl);
  for (int r = 0; r < 8; ++r) {
    const __m512i sc = _mm512_sub_epi32(
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * r), m15), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * r), m3), 4)),
        bias);
    U.sc[2 * r] = U.sc[2 * r + 1] = sc;
    const __m512i mo = _mm512_slli_epi32(sc, 7);
    U.mo[r] = int16_pair(mo, mo);
    for (int w = 0; w < 4; ++w) {
      const __m512i v = load512(g + kQs + 64 * (4 * r + w));
      U.u[8 * r + w] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
      U.u[8 * r + 4 + w] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
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
    const __m512 ad = _mm512_set1_ps(act_block(act, as, j, b).d);
    __m512 acc = _mm512_loadu_ps(out + j * os);
    if (U.joint) {
      acc = _mm512_fmadd_ps(_mm512_mul_ps(U.d, ad), _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[j], msum[j])), acc);
    } else {
      acc = _mm512_fmadd_ps(_mm512_mul_ps(U.d, ad), _mm512_cvtepi32_ps(isum[j]), acc);
      acc = _mm512_fnmadd_ps(_mm512_mul_ps(U.dm, ad), _mm512_cvtepi32_ps(msum[j]), acc);
    }
    _mm512_storeu_ps(out + j * os, acc);
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
      case DType::Q2_K: unpack_q2_k(g, U); break;
      case DType::Q3_K: unpack_q3_k(g, U); break;
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
    case DType::Q2_K: return tile_x16_q2_k<RN>(nb, group, act, as, out, os);
    case DType::Q3_K: return tile_x16_q3_k<RN>(nb, group, act, as, out, os);
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
  const int64_t nb = K / 256;
  switch (rn) {
    case 1: return tile_x16<1>(t, nb, group, act, act_stride, out, out_stride);
    case 2: return tile_x16<2>(t, nb, group, act, act_stride, out, out_stride);
    case 3: return tile_x16<3>(t, nb, group, act, act_stride, out, out_stride);
    default: return tile_x16<4>(t, nb, group, act, act_stride, out, out_stride);
  }
#else
  portable::dot_tile_x16(t, K, group, act, act_stride, rn, out, out_stride);
#endif
}

void dot_group_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int64_t n, float* out,
                   int64_t out_stride) {
#ifdef SLAKE_X16_KERNEL
  group_x16(t, K / 256, group, act, act_stride, n, out, out_stride);
#else
  for (int64_t j = 0; j < n; j += kTileTokens)
    dot_tile_x16(t, K, group, act + static_cast<size_t>(j) * act_stride, act_stride,
                 static_cast<int>(std::min<int64_t>(kTileTokens, n - j)), out + j * out_stride, out_stride);
#endif
}

bool x16_kernel_available() {
#ifdef SLAKE_X16_KERNEL
  return true;
#else
  return false;
#endif
}

}  // namespace slake
