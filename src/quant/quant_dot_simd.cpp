// SIMD dot products (x86: AVX2 + FMA + F16C, with AVX-512 for the float weights and AVX-512 VNNI
// for the int8 products where the compiler targets them). Register tiles of up to 4 weight rows x
// 4 activation rows load each weight block once per 4 tokens and each activation block once per 4
// rows. Without AVX2 the portable kernels run.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports as
// uninitialised (a false positive of the compiler's own headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "slake/quant/quant_blocks.h"
#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/quant/quant_dot.h"

namespace slake {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

namespace {

using quant::load_u16;

using namespace simd;

// The 32 quants of a Q4_0 block as unsigned bytes (0..15, the stored nibbles), low nibbles first.
// The 16 bytes go to both halves in one load, and the upper half is shifted by a nibble in
// place (a shift per 64-bit word: the bits that cross into a byte are masked off).
inline __m256i unpack_q4_0(const uint8_t* qs) {
  const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

// Q8_0 and Q4_0 weights x Q8_0 activations. The int8 products need one operand unsigned:
// - Q4_0: the stored nibbles n = q + 8 are unsigned; sum (n - 8) a = sum n a - 8 sum a, and the
//   -8 sum a term, shared by every row, starts the accumulator.
// - Q8_0 with VNNI: the activations are shifted to unsigned, u = a + 128; sum w a = sum w u -
//   128 sum w, and the row's -128 sum w starts the accumulator.
// - Q8_0 without VNNI: |w| . sign(a, w), which cannot saturate int16.
template <int RM, int RN>
void tile_q8_0_q4_0(bool q4, int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                    int64_t os) {
  const size_t wb = q4 ? 18 : 34;
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[RM], wstart[RM];
    __m256 wd[RM];
    for (int i = 0; i < RM; ++i) {
      const uint8_t* p = w + i * ws + b * wb;
      _mm_prefetch(reinterpret_cast<const char*>(p + RM * ws), _MM_HINT_T0);  // see the pair kernel
      wd[i] = _mm256_set1_ps(f16(p));
      if (q4) {
        wq[i] = unpack_q4_0(p + 2);
      } else {
        wq[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
        if (kVnni) wstart[i] = _mm256_sub_epi32(zero, dot_u8_s8(zero, _mm256_set1_epi8(static_cast<char>(0x80)), wq[i]));
      }
    }
    for (int j = 0; j < RN; ++j) {
      const uint8_t* p = a + j * as + b * 34;
      const __m256 ad = _mm256_set1_ps(f16(p));
      const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      if (q4) {
        const __m256i start = _mm256_sub_epi32(zero, dot_u8_s8(zero, _mm256_set1_epi8(8), aq));
        for (int i = 0; i < RM; ++i)
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_s8(start, wq[i], aq)), _mm256_mul_ps(wd[i], ad), acc[i][j]);
      } else if (kVnni) {
        const __m256i au = _mm256_xor_si256(aq, _mm256_set1_epi8(static_cast<char>(0x80)));
        for (int i = 0; i < RM; ++i)
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_s8(wstart[i], au, wq[i])), _mm256_mul_ps(wd[i], ad), acc[i][j]);
      } else {
        for (int i = 0; i < RM; ++i) {
          const __m256i d = dot_u8_s8(zero, _mm256_sign_epi8(wq[i], wq[i]), _mm256_sign_epi8(aq, wq[i]));
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(wd[i], ad), acc[i][j]);
        }
      }
    }
  }
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) out[j * os + i] = hsum(acc[i][j]);
}

#if !SLAKE_VNNI_BUILD
#define SLAKE_Q4_0_ROWS8 1
// Q4_0 x Q8_0 for 8 rows at once without VNNI, one row per 32-bit lane, so that the scaling
// and the float accumulation are one operation per 8 rows instead of one per row, and no
// horizontal sums are needed. Per block the weights are 4 vectors g0..g3 (vector k: bytes
// 4k..4k+3 of row i in lane i), either transposed in registers from the file's rows or loaded as
// they are from the X8 layout (quant_dot.h). The low nibbles of gk are quants 4k..4k+3, the high
// nibbles quants 16+4k.., and each meets the matching 4 activation bytes broadcast to every
// lane. The 8 maddubs products of a block add up in int16: each pair sum is at most
// 2 * 15 * 127 = 3810 in magnitude, so 8 of them (30480) cannot wrap. The -8 of the stored
// nibbles is -8 sum a, the same in every lane.
struct Q4Rows8 {
  __m256i lo[4], hi[4];
  __m256 d;  // the 8 rows' scales
};

inline void split_nibbles(const __m256i g[4], Q4Rows8& w) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    w.lo[k] = _mm256_and_si256(g[k], m4);
    w.hi[k] = _mm256_and_si256(_mm256_srli_epi16(g[k], 4), m4);
  }
}

// acc[j] += the block's 8 dot products with activation block b of token j.
template <int RN>
inline void accumulate_rows8(const Q4Rows8& w, const uint8_t* a, size_t as, int64_t b, __m256* acc) {
  for (int j = 0; j < RN; ++j) {
    const uint8_t* ab = a + j * as + b * 34;
    const uint8_t* aq = ab + 2;
    auto act4 = [&](int at) {
      int32_t v;
      std::memcpy(&v, aq + at, 4);
      return _mm256_set1_epi32(v);
    };
    __m256i s16 = _mm256_maddubs_epi16(w.lo[0], act4(0));
    for (int k = 1; k < 4; ++k) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w.lo[k], act4(4 * k)));
    for (int k = 0; k < 4; ++k) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w.hi[k], act4(16 + 4 * k)));
    // sum a over the block, times 8: |sum a| <= 32 * 127, in int32 via sad on a + 128.
    const __m256i au = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq)),
                                        _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256i sad = _mm256_sad_epu8(au, _mm256_setzero_si256());
    __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
    const int32_t off = 8 * (_mm_cvtsi128_si32(h) - 32 * 128);
    const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), _mm256_set1_epi32(off));
    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(w.d, _mm256_set1_ps(f16(ab))), acc[j]);
  }
}

template <int RN>
inline void store_rows8(const __m256* acc, int rm, float* out, int64_t os) {
  for (int j = 0; j < RN; ++j) {
    alignas(32) float sums[8];
    _mm256_store_ps(sums, acc[j]);
    for (int i = 0; i < rm; ++i) out[j * os + i] = sums[i];
  }
}

// From the file's rows; rows past rm repeat row rm - 1.
template <int RN>
void tile8_q4_0(int64_t nb, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, float* out, int64_t os) {
  const uint8_t* r[8];
  for (int i = 0; i < 8; ++i) r[i] = w + static_cast<size_t>(std::min(i, rm - 1)) * ws;
  __m256 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t o = static_cast<size_t>(b) * 18;
    for (int i = 0; i < 8; ++i) _mm_prefetch(reinterpret_cast<const char*>(r[i] + o + 8 * ws), _MM_HINT_T0);
    Q4Rows8 wt;
    wt.d = _mm256_cvtph_ps(_mm_setr_epi16(
        static_cast<int16_t>(load_u16(r[0] + o)), static_cast<int16_t>(load_u16(r[1] + o)),
        static_cast<int16_t>(load_u16(r[2] + o)), static_cast<int16_t>(load_u16(r[3] + o)),
        static_cast<int16_t>(load_u16(r[4] + o)), static_cast<int16_t>(load_u16(r[5] + o)),
        static_cast<int16_t>(load_u16(r[6] + o)), static_cast<int16_t>(load_u16(r[7] + o))));
    auto rows2 = [&](int i) {  // row i in the low half, row i + 4 in the high half
      return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(r[i + 4] + o + 2),
                                 reinterpret_cast<const __m128i*>(r[i] + o + 2));
    };
    const __m256i y0 = rows2(0), y1 = rows2(1), y2 = rows2(2), y3 = rows2(3);
    const __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
    const __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
    const __m256i g[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                          _mm256_unpackhi_epi64(t1, t3)};
    split_nibbles(g, wt);
    accumulate_rows8<RN>(wt, a, as, b, acc);
  }
  store_rows8<RN>(acc, rm, out, os);
}

// From an X8 group: one stream of 144 bytes a block, prefetched a few blocks ahead.
template <int RN>
void tile_x8_q4_0(int64_t nb, const uint8_t* g8, const uint8_t* a, size_t as, float* out, int64_t os) {
  __m256 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g8 += 144) {
    for (int o = 0; o < 144; o += 64) _mm_prefetch(reinterpret_cast<const char*>(g8 + 8 * 144 + o), _MM_HINT_T0);
    Q4Rows8 wt;
    wt.d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g8)));
    __m256i g[4];
    for (int k = 0; k < 4; ++k) g[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g8 + 16 + 32 * k));
    split_nibbles(g, wt);
    accumulate_rows8<RN>(wt, a, as, b, acc);
  }
  store_rows8<RN>(acc, 8, out, os);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define SLAKE_PAIR_KERNEL 1
// How many runs ahead the group kernels prefetch (SLAKE_X4_PREFETCH overrides, for measuring).
const int64_t kX4PrefetchRuns = [] {
  const char* e = std::getenv("SLAKE_X4_PREFETCH");
  return e ? std::atoll(e) : 16;
}();
// The same products two blocks at a time in 512-bit registers. Q8_0 pairs are laid out in order
// (int32 lanes 0-7 block 0, 8-15 block 1). A Q4_0 pair unpacks as [lo0 lo1 hi0 hi1] (16 bytes
// each), so its activations are permuted to match and the lanes alternate blocks by four.
// Both weight types go in unsigned, n = w + o (Q4_0: the stored nibbles, o = 8; Q8_0: w xor 0x80,
// o = 128), so sum w a = sum n a - o sum a, and -o sum a, shared by every row, starts the
// accumulator of each activation block.
// A register tile of 512-bit accumulators: cleared, and written out as row sums.
template <int RM, int RN>
inline void zero_tile(__m512 (&acc)[RM][RN]) {
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
}
template <int RM, int RN>
inline void store_sums(const __m512 (&acc)[RM][RN], float* out, int64_t os) {
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) out[j * os + i] = hsum512(acc[i][j]);
}

inline __m512 pair_scales(const uint8_t* p0, const uint8_t* p1, __m512i lanes) {
  const uint32_t both = static_cast<uint32_t>(load_u16(p0)) | static_cast<uint32_t>(load_u16(p1)) << 16;
  return _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(both)))));
}

template <int RM, int RN>
void tile_q8_0_q4_0_pairs(bool q4, int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                          int64_t os) {
  const size_t wb = q4 ? 18 : 34;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i lanes = q4 ? _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0)
                           : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(q4 ? 8 : 0x80));
  __m512 acc[RM][RN];
  zero_tile<RM, RN>(acc);
  for (int64_t b = 0; b + 1 < nb; b += 2) {
    __m512i wq[RM];
    __m512 wd[RM];
    for (int i = 0; i < RM; ++i) {
      const uint8_t* p = w + i * ws + b * wb;
      // A row is only ~1 KiB, too short for the hardware prefetcher to ramp up: fetch the same
      // place in the row RM further down, which the next tile reads.
      _mm_prefetch(reinterpret_cast<const char*>(p + RM * ws), _MM_HINT_T0);
      wd[i] = pair_scales(p, p + wb, lanes);
      if (q4) {
        const __m256i q = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + wb + 2)),
                                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        wq[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      } else {
        wq[i] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
                                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + wb + 2)), 1),
                                 offset);
      }
    }
    for (int j = 0; j < RN; ++j) {
      const uint8_t* p = a + j * as + b * 34;
      const __m512 ad = pair_scales(p, p + 34, lanes);
      __m512i aq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36)), 1);
      if (q4) aq = _mm512_shuffle_i64x2(aq, aq, _MM_SHUFFLE(3, 1, 2, 0));  // [a0 lo, a1 lo, a0 hi, a1 hi]
      const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, aq));
      for (int i = 0; i < RM; ++i)
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wq[i], aq)), _mm512_mul_ps(wd[i], ad),
                                    acc[i][j]);
    }
  }
  store_sums<RM, RN>(acc, out, os);
}

// dot_rows16_q8_0: 16 rows by one activation row, a block pair at a time. Each row's pair is one
// 512-bit register of unsigned quants (w xor 0x80, as in the pair kernel); dpbusd against the
// activation's pair gives 16 int32 lanes per row, lanes 0-7 block 0 and 8-15 block 1. A transposing
// tree of adds turns the 16 rows' registers into two, lane i holding row i's block-0 (block-1) sum,
// which meet the rows' scales, gathered a lane per row, in two multiply-adds.
inline __m512i add_unpack32(__m512i a, __m512i b) {  // per 128-bit lane [a0+a2, b0+b2, a1+a3, b1+b3]
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
inline __m512i add_unpack64(__m512i a, __m512i b) {  // per 128-bit lane [a0+a1, b0+b1] of 64-bit halves
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
inline __m512i add_lanes128(__m512i a, __m512i b) {  // [a.L0 + a.L1, a.L2 + a.L3, b.L0 + b.L1, b.L2 + b.L3]
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xDD));
}

// The 16 rows' fp16 scales of one block, a lane per row (the 32-bit word at each block's start,
// low half), as floats.
inline __m512 rows16_scales(const uint8_t* w, size_t ws) {
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(static_cast<int>(ws)));
  const __m512i words = _mm512_i32gather_epi32(rows, w, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_and_si512(words, _mm512_set1_epi32(0xFFFF))));
}

// One activation row's pair (block b, and b + 1 when `pair`) against the 16 rows' pairs at w: the
// rows' integer block sums, block 0's in lane i of *b0 and block 1's in lane i of *b1 for row i.
// The tree reduces the rows four at a time as their products come, so that few registers stay live.
inline void rows16_pair(const uint8_t* w, size_t ws, const uint8_t* a, bool pair, __m512i* b0, __m512i* b1) {
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  // Upper half zero without a second block: its products are then 0 whatever the rows hold there.
  __m512i aq = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2)));
  if (pair) aq = _mm512_inserti64x4(aq, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 36)), 1);
  const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, aq));  // -128 sum a, per lane
  const auto row = [&](int i) {
    const uint8_t* p = w + i * ws;
    __m512i wq = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
    if (pair) wq = _mm512_inserti64x4(wq, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36)), 1);
    return _mm512_dpbusd_epi32(start, _mm512_xor_si512(wq, offset), aq);
  };
  __m512i u[4];  // rows 4q..4q+3, per 128-bit lane
  for (int q = 0; q < 4; ++q) {
    const __m512i t0 = add_unpack32(row(4 * q), row(4 * q + 1));
    const __m512i t1 = add_unpack32(row(4 * q + 2), row(4 * q + 3));
    u[q] = add_unpack64(t0, t1);
  }
  const __m512i r01 = add_lanes128(u[0], u[1]), r23 = add_lanes128(u[2], u[3]);
  *b0 = _mm512_shuffle_i32x4(r01, r23, 0x88);
  *b1 = _mm512_shuffle_i32x4(r01, r23, 0xDD);
}

// The kernels of repacked groups of 4 rows (quant_dot.h): a group's bytes are one contiguous
// stream, a run's 4 x R scales are one load and one conversion (each row's lanes are then a
// permutation of them), and each row's quants in a run are one 512-bit load. Offsets as in the
// pair kernel: weights unsigned (n = w + o), -o sum a starts each activation block's accumulator.
inline void prefetch_run(const uint8_t* p, size_t n) {
  for (size_t o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

// Q8_0, runs of 2 blocks: row i's pair is 64 bytes (int32 lanes 0-7 block 0, 8-15 block 1).
template <int RN>
void tile_x4_q8_0(int64_t nruns, const uint8_t* g, const uint8_t* a, size_t as, float* out, int64_t os) {
  constexpr int RM = kGroupRows;
  constexpr size_t runb = x4_run_bytes(DType::Q8_0);
  const __m512i zero = _mm512_setzero_si512(), offset = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512i row_lanes[RM];  // row i's scales are 2i and 2i + 1 of the run's eight
  for (int i = 0; i < RM; ++i) row_lanes[i] = _mm512_add_epi32(lanes, _mm512_set1_epi32(2 * i));
  __m512 acc[RM][RN];
  zero_tile<RM, RN>(acc);
  for (int64_t r = 0; r < nruns; ++r, g += runb) {
    prefetch_run(g + kX4PrefetchRuns * runb, runb);
    const __m512 scales = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g))));
    __m512i wq[RM];
    __m512 wd[RM];
    for (int i = 0; i < RM; ++i) {
      wd[i] = _mm512_permutexvar_ps(row_lanes[i], scales);
      wq[i] = _mm512_xor_si512(_mm512_loadu_si512(g + 16 + 64 * i), offset);
    }
    for (int j = 0; j < RN; ++j) {
      const uint8_t* p = a + j * as + r * 68;
      const __m512 ad = pair_scales(p, p + 34, lanes);
      const __m512i aq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36)), 1);
      const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, aq));
      for (int i = 0; i < RM; ++i)
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wq[i], aq)), _mm512_mul_ps(wd[i], ad),
                                    acc[i][j]);
    }
  }
  store_sums<RM, RN>(acc, out, os);
}

// Q4_0, runs of 4 blocks: row i's 128 nibbles are one 64-byte load, whose low nibbles are the
// first 16 quants of each block and whose high nibbles the last 16 (int32 lanes 4b..4b+3 are block
// b in both). The activations are arranged to match: their blocks' first halves, then their
// second halves.
template <int RN>
void tile_x4_q4_0(int64_t nruns, const uint8_t* g, const uint8_t* a, size_t as, float* out, int64_t os) {
  constexpr int RM = kGroupRows;
  constexpr size_t runb = x4_run_bytes(DType::Q4_0);
  const __m512i zero = _mm512_setzero_si512(), offset = _mm512_set1_epi8(8), m4 = _mm512_set1_epi8(0x0F);
  const __m512i lanes = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  __m512i row_lanes[RM];  // row i's scales are 4i .. 4i + 3 of the run's sixteen
  for (int i = 0; i < RM; ++i) row_lanes[i] = _mm512_add_epi32(lanes, _mm512_set1_epi32(4 * i));
  __m512 acc[RM][RN];
  zero_tile<RM, RN>(acc);
  for (int64_t r = 0; r < nruns; ++r, g += runb) {
    prefetch_run(g + kX4PrefetchRuns * runb, runb);
    const __m512 scales = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    __m512i lo[RM], hi[RM];
    __m512 wd[RM];
    for (int i = 0; i < RM; ++i) {
      wd[i] = _mm512_permutexvar_ps(row_lanes[i], scales);
      const __m512i q = _mm512_loadu_si512(g + 32 + 64 * i);
      lo[i] = _mm512_and_si512(q, m4);
      hi[i] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
    for (int j = 0; j < RN; ++j) {
      const uint8_t* p = a + j * as + r * 136;
      const __m128i d4 = _mm_setr_epi16(static_cast<short>(load_u16(p)), static_cast<short>(load_u16(p + 34)),
                                        static_cast<short>(load_u16(p + 68)), static_cast<short>(load_u16(p + 102)), 0, 0, 0, 0);
      const __m512 ad = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_cvtph_ps(d4)));
      const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36)), 1);
      const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 70))),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 104)), 1);
      const __m512i a_lo = _mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(2, 0, 2, 0));  // first halves of blocks 0..3
      const __m512i a_hi = _mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(3, 1, 3, 1));  // second halves
      const __m512i start =
          _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, offset, a_lo), offset, a_hi));
      for (int i = 0; i < RM; ++i) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo[i], a_lo), hi[i], a_hi);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(wd[i], ad), acc[i][j]);
      }
    }
  }
  store_sums<RM, RN>(acc, out, os);
}
#endif

// Float weights against fp32 activations, in vectors of kV floats.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
using VecF = __m512;
constexpr int kV = 16;
inline VecF vzero() { return _mm512_setzero_ps(); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(VecF v) { return hsum512(v); }
inline VecF load_f32(const float* p) { return _mm512_loadu_ps(p); }
inline VecF load_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VecF load_bf16(const uint8_t* p) {
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
#else
using VecF = __m256;
constexpr int kV = 8;
inline VecF vzero() { return _mm256_setzero_ps(); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(VecF v) { return hsum(v); }
inline VecF load_f32(const float* p) { return _mm256_loadu_ps(p); }
inline VecF load_f16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline VecF load_bf16(const uint8_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
#endif

template <DType T>
inline VecF load_weights(const uint8_t* p) {
  if constexpr (T == DType::F32) return load_f32(reinterpret_cast<const float*>(p));
  else if constexpr (T == DType::F16) return load_f16(p);
  else return load_bf16(p);
}

// The weight type is a template parameter, so the inner loop holds no dispatch.
template <DType T, int RM, int RN>
void tile_float(int64_t K, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, int64_t os) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  VecF acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = vzero();
  int64_t k = 0;
  for (; k + kV <= K; k += kV) {
    VecF wv[RM];
    for (int i = 0; i < RM; ++i) {
      if (RN == 1) _mm_prefetch(reinterpret_cast<const char*>(w + (i + RM) * ws + k * esz), _MM_HINT_T0);  // see the pair kernel
      wv[i] = load_weights<T>(w + i * ws + k * esz);
    }
    for (int j = 0; j < RN; ++j) {
      const VecF av = load_f32(reinterpret_cast<const float*>(a + j * as) + k);
      for (int i = 0; i < RM; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
    }
  }
  if (k < K) {  // the ragged end, through zero-padded copies
    const int64_t rest = K - k;
    alignas(64) uint8_t wpad[kV * 4];
    alignas(64) float apad[kV];
    VecF wv[RM];
    for (int i = 0; i < RM; ++i) {
      std::memset(wpad, 0, sizeof wpad);
      std::memcpy(wpad, w + i * ws + k * esz, static_cast<size_t>(rest) * esz);
      wv[i] = load_weights<T>(wpad);
    }
    for (int j = 0; j < RN; ++j) {
      std::memset(apad, 0, sizeof apad);
      std::memcpy(apad, reinterpret_cast<const float*>(a + j * as) + k, static_cast<size_t>(rest) * 4);
      const VecF av = load_f32(apad);
      for (int i = 0; i < RM; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
    }
  }
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) out[j * os + i] = vsum(acc[i][j]);
}

template <int RM, int RN>
void tile(DType t, int64_t K, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, int64_t os) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0: {
      const bool q4 = t == DType::Q4_0;
#ifdef SLAKE_PAIR_KERNEL
      const int64_t nb = K / 32;
      tile_q8_0_q4_0_pairs<RM, RN>(q4, nb, w, ws, a, as, out, os);
      if (nb % 2 == 1) {  // the last block alone
        float last[RM * RN];
        const int64_t b = nb - 1;
        tile_q8_0_q4_0<RM, RN>(q4, 1, w + b * (q4 ? 18 : 34), ws, a + b * 34, as, last, RM);
        for (int j = 0; j < RN; ++j)
          for (int i = 0; i < RM; ++i) out[j * os + i] += last[j * RM + i];
      }
#else
      tile_q8_0_q4_0<RM, RN>(q4, K / 32, w, ws, a, as, out, os);
#endif
      return;
    }
    case DType::F32: tile_float<DType::F32, RM, RN>(K, w, ws, a, as, out, os); return;
    case DType::F16: tile_float<DType::F16, RM, RN>(K, w, ws, a, as, out, os); return;
    default: tile_float<DType::BF16, RM, RN>(K, w, ws, a, as, out, os); return;
  }
}

template <int RM>
void tile_rows(DType t, int64_t K, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int rn, float* out,
               int64_t os) {
  switch (rn) {
    case 1: tile<RM, 1>(t, K, w, ws, a, as, out, os); return;
    case 2: tile<RM, 2>(t, K, w, ws, a, as, out, os); return;
    case 3: tile<RM, 3>(t, K, w, ws, a, as, out, os); return;
    default: tile<RM, 4>(t, K, w, ws, a, as, out, os); return;
  }
}

}  // namespace

void dot_tile(DType t, int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride,
              int rn, float* out, int64_t out_stride, bool prompt) {
  if (simd::is_kquant_type(t)) return simd::tile_kquant(t, K, w, w_stride, rm, act, act_stride, rn, out, out_stride, prompt);
  if (simd::is_block32_type(t)) return simd::tile_block32(t, K, w, w_stride, rm, act, act_stride, rn, out, out_stride);
#ifdef SLAKE_Q4_0_ROWS8
  if (t == DType::Q4_0 && rm > kTileRows) {
    const int64_t nb = K / 32;
    switch (rn) {
      case 1: tile8_q4_0<1>(nb, w, w_stride, rm, act, act_stride, out, out_stride); return;
      case 2: tile8_q4_0<2>(nb, w, w_stride, rm, act, act_stride, out, out_stride); return;
      case 3: tile8_q4_0<3>(nb, w, w_stride, rm, act, act_stride, out, out_stride); return;
      default: tile8_q4_0<4>(nb, w, w_stride, rm, act, act_stride, out, out_stride); return;
    }
  }
#endif
  switch (rm) {
    case 1: tile_rows<1>(t, K, w, w_stride, act, act_stride, rn, out, out_stride); return;
    case 2: tile_rows<2>(t, K, w, w_stride, act, act_stride, rn, out, out_stride); return;
    case 3: tile_rows<3>(t, K, w, w_stride, act, act_stride, rn, out, out_stride); return;
    default: tile_rows<4>(t, K, w, w_stride, act, act_stride, rn, out, out_stride); return;
  }
}

void dot_tile_x4(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride) {
#ifdef SLAKE_PAIR_KERNEL
  const int64_t nruns = K / (32 * x4_run_blocks(t));
  const auto run = [&](auto kernel) { kernel(nruns, group, act, act_stride, out, out_stride); };
  const bool q4 = t == DType::Q4_0;
  switch (rn) {
    case 1: return q4 ? run(tile_x4_q4_0<1>) : run(tile_x4_q8_0<1>);
    case 2: return q4 ? run(tile_x4_q4_0<2>) : run(tile_x4_q8_0<2>);
    case 3: return q4 ? run(tile_x4_q4_0<3>) : run(tile_x4_q8_0<3>);
    default: return q4 ? run(tile_x4_q4_0<4>) : run(tile_x4_q8_0<4>);
  }
#else
  portable::dot_tile_x4(t, K, group, act, act_stride, rn, out, out_stride);
#endif
}

bool x4_kernel_available() {
#ifdef SLAKE_PAIR_KERNEL
  return true;
#else
  return false;
#endif
}

void dot_tile_x8(int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride) {
#ifdef SLAKE_Q4_0_ROWS8
  const int64_t nb = K / 32;
  switch (rn) {
    case 1: tile_x8_q4_0<1>(nb, group, act, act_stride, out, out_stride); return;
    case 2: tile_x8_q4_0<2>(nb, group, act, act_stride, out, out_stride); return;
    case 3: tile_x8_q4_0<3>(nb, group, act, act_stride, out, out_stride); return;
    default: tile_x8_q4_0<4>(nb, group, act, act_stride, out, out_stride); return;
  }
#else
  portable::dot_tile_x8(K, group, act, act_stride, rn, out, out_stride);
#endif
}

bool x8_kernel_available() {
#ifdef SLAKE_Q4_0_ROWS8
  return true;
#else
  return false;
#endif
}

int tile_rows_max(DType t) {
#ifdef SLAKE_Q4_0_ROWS8
  if (t == DType::Q4_0) return kWideTileRows;
#endif
  (void)t;
  return kTileRows;
}

const char* dot_kernel_isa() {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
  return "avx512-vnni";
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  return "avx512";
#else
  return "avx2";
#endif
}

#else  // no AVX2: the portable kernels

void dot_tile_x4(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride) {
  portable::dot_tile_x4(t, K, group, act, act_stride, rn, out, out_stride);
}

bool x4_kernel_available() { return false; }

int tile_rows_max(DType) { return kTileRows; }

void dot_tile_x8(int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride) {
  portable::dot_tile_x8(K, group, act, act_stride, rn, out, out_stride);
}

bool x8_kernel_available() { return false; }

void dot_tile(DType t, int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride,
              int rn, float* out, int64_t out_stride, bool /*prompt*/) {
  portable::dot_tile(t, K, w, w_stride, rm, act, act_stride, rn, out, out_stride);
}

const char* dot_kernel_isa() { return "portable"; }

#endif

#ifdef SLAKE_PAIR_KERNEL
namespace {
// Where max_lanes16 wants the vector whose largest lane goes to lane j: its shuffles leave lane j
// holding the largest of v[kMaxSlot[j]] (the map is its own inverse).
constexpr int kMaxSlot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// The largest lane of each of 16 vectors in one vector: four levels, each shuffling pairs of
// vectors into halves (blocks of 4 lanes, then lanes within a block) and taking their maxima,
// 15 maxima for the 16 instead of a reduction each.
inline __m512 max_lanes16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  for (int j = 0; j < 8; ++j)
    a[j] = _mm512_max_ps(_mm512_shuffle_f32x4(v[j], v[j + 8], 0x44), _mm512_shuffle_f32x4(v[j], v[j + 8], 0xEE));
  for (int j = 0; j < 4; ++j)
    b[j] = _mm512_max_ps(_mm512_shuffle_f32x4(a[j], a[j + 4], 0x88), _mm512_shuffle_f32x4(a[j], a[j + 4], 0xDD));
  for (int j = 0; j < 2; ++j)
    c[j] = _mm512_max_ps(_mm512_shuffle_ps(b[j], b[j + 2], 0x44), _mm512_shuffle_ps(b[j], b[j + 2], 0xEE));
  return _mm512_max_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
}

// Up to 16 tiles against the rn rows: per row, the tiles' 16 accumulators side by side (one dpbusd
// per 4 values of all 16 lanes; the +128 of every u comes off as 128 sum q once), then each tile's
// largest lane for all 16 at once. Tile i at base + i stride. kWhole: 16 tiles, every lane valid;
// else nt tiles, the last one's lanes last_lanes, the slots past it repeating it (not stored).
// M: r / 4 when the caller knows it (the store's ranks), else 0 and m_n.
template <int M, bool kWhole>
void max_dot_block16(int m_n, const uint8_t* base, size_t stride, int nt, __mmask16 last_lanes, const int8_t* q,
                     size_t q_stride, const float* q_scale, const int32_t* q_sum, int rn, float* out, size_t out_stride) {
  if (M > 0) m_n = M;
  const auto tile = [&](int i) { return base + static_cast<size_t>(kWhole ? i : std::min(i, nt - 1)) * stride; };
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int k = 0; k < rn; ++k) {
    const int8_t* qk = q + static_cast<size_t>(k) * q_stride;
    __m512i acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(-128 * q_sum[k]);
    for (int m = 0; m < m_n; ++m) {
      int32_t q4;
      std::memcpy(&q4, qk + 4 * m, 4);
      const __m512i qb = _mm512_set1_epi32(q4);
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_loadu_si512(tile(i) + 32 + 64 * m), qb);
    }
    const __m512 qs = _mm512_set1_ps(q_scale[k]);
    __m512 v[16];
    for (int i = 0; i < 16; ++i) {
      const __m512 ks = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile(i))));
      const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]), _mm512_mul_ps(ks, qs));
      v[kMaxSlot[i]] = kWhole ? x : _mm512_mask_blend_ps(i + 1 >= nt ? last_lanes : static_cast<__mmask16>(0xFFFF), neg_inf, x);
    }
    _mm512_mask_storeu_ps(out + static_cast<size_t>(k) * out_stride, static_cast<__mmask16>(kWhole ? 0xFFFF : (1u << nt) - 1),
                          max_lanes16(v));
  }
}

template <int M>
void max_dot_tiles(int m_n, const uint8_t* tiles, size_t tile_stride, int n_tiles, int valid_last, const int8_t* q, size_t q_stride,
                   const float* q_scale, const int32_t* q_sum, int rn, float* out, size_t out_stride) {
  const __mmask16 last_lanes = static_cast<__mmask16>(valid_last >= 16 ? 0xFFFF : (1u << std::max(valid_last, 0)) - 1);
  for (int t0 = 0; t0 < n_tiles; t0 += 16) {
    const int nt = std::min(16, n_tiles - t0);
    const uint8_t* base = tiles + static_cast<size_t>(t0) * tile_stride;
    // The store streams from memory once a step: the block after next is fetched into L2 while
    // this one is scored (a block is 16 tiles, 4.5 KiB at r = 16). 1.3-1.4x on a store of 4M keys
    // (BM_recall_first_pass); into L1 it was no faster than none.
    if (t0 + 48 <= n_tiles) {
      const char* ahead = reinterpret_cast<const char*>(base + 32 * tile_stride);
      for (size_t b = 0; b < 16 * tile_stride; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T1);
    }
    if (nt == 16 && (t0 + 16 < n_tiles || last_lanes == 0xFFFF))
      max_dot_block16<M, true>(m_n, base, tile_stride, nt, last_lanes, q, q_stride, q_scale, q_sum, rn, out + t0, out_stride);
    else
      max_dot_block16<M, false>(m_n, base, tile_stride, nt, last_lanes, q, q_stride, q_scale, q_sum, rn, out + t0, out_stride);
  }
}
}  // namespace
#endif

void max_dot_lanes16_u8(int r, const uint8_t* tiles, size_t tile_stride, int n_tiles, int valid_last, const int8_t* q,
                        size_t q_stride, const float* q_scale, const int32_t* q_sum, int rn, float* out, size_t out_stride) {
#ifdef SLAKE_PAIR_KERNEL
  // The recall store's ranks (16, 32, 64: head dimensions 64, 128, 256 over 4), compiled with their loop counts.
  switch (r) {
    case 16: return max_dot_tiles<4>(4, tiles, tile_stride, n_tiles, valid_last, q, q_stride, q_scale, q_sum, rn, out, out_stride);
    case 32: return max_dot_tiles<8>(8, tiles, tile_stride, n_tiles, valid_last, q, q_stride, q_scale, q_sum, rn, out, out_stride);
    case 64: return max_dot_tiles<16>(16, tiles, tile_stride, n_tiles, valid_last, q, q_stride, q_scale, q_sum, rn, out, out_stride);
    default: return max_dot_tiles<0>(r / 4, tiles, tile_stride, n_tiles, valid_last, q, q_stride, q_scale, q_sum, rn, out, out_stride);
  }
#elif defined(__AVX2__) && defined(__F16C__)
  // Per tile and row, the 16 lanes' sums as two vectors of 8 (a 64-byte group's first 32 bytes are
  // keys 0-7): v = u - 128 signed, then maddubs of |v| and q signed as v (|v| <= 128, |q| <= 127:
  // a pair's sum fits int16) and madd by ones to int32; the same integers as the VNNI kernel's,
  // without its correction by q_sum.
  (void)q_sum;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  const __m256i lane_lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lane_hi = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int t = 0; t < n_tiles; ++t) {
    const uint8_t* tile = tiles + static_cast<size_t>(t) * tile_stride;
    const uint8_t* u = tile + 32;
    const __m256i valid = _mm256_set1_epi32(t + 1 == n_tiles ? std::min(valid_last, 16) : 16);
    const __m256 keep_lo = _mm256_castsi256_ps(_mm256_cmpgt_epi32(valid, lane_lo));
    const __m256 keep_hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(valid, lane_hi));
    const __m256 ks_lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile)));
    const __m256 ks_hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16)));
    for (int k = 0; k < rn; ++k) {
      const int8_t* qk = q + static_cast<size_t>(k) * q_stride;
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      for (int m = 0; m < r / 4; ++m) {
        int32_t q4;
        std::memcpy(&q4, qk + 4 * m, 4);
        const __m256i qb = _mm256_set1_epi32(q4);
        const __m256i v0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 64 * m)), flip);
        const __m256i v1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 64 * m + 32)), flip);
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(v0), _mm256_sign_epi8(qb, v0)), ones));
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(v1), _mm256_sign_epi8(qb, v1)), ones));
      }
      const __m256 qs = _mm256_set1_ps(q_scale[k]);
      const __m256 x_lo = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(ks_lo, qs)), keep_lo);
      const __m256 x_hi = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(ks_hi, qs)), keep_hi);
      const __m256 m8 = _mm256_max_ps(x_lo, x_hi);
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      out[static_cast<size_t>(k) * out_stride + static_cast<size_t>(t)] = _mm_cvtss_f32(m4);
    }
  }
#else
  for (int t = 0; t < n_tiles; ++t) {
    const uint8_t* tile = tiles + static_cast<size_t>(t) * tile_stride;
    const uint8_t* u = tile + 32;
    const int valid = t + 1 == n_tiles ? std::min(valid_last, 16) : 16;
    for (int k = 0; k < rn; ++k) {
      const int8_t* qk = q + static_cast<size_t>(k) * q_stride;
      float top = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < valid; ++j) {
        int32_t s = -128 * q_sum[k];
        for (int i = 0; i < r; ++i) s += static_cast<int32_t>(u[64 * (i / 4) + 4 * j + i % 4]) * qk[i];
        top = std::max(top, static_cast<float>(s) * (fp16_to_fp32(quant::load_u16(tile + 2 * j)) * q_scale[k]));
      }
      out[static_cast<size_t>(k) * out_stride + static_cast<size_t>(t)] = top;
    }
  }
#endif
}

void dot_rows16_q8_0(int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride, int rn,
                     float* out, int64_t out_stride) {
#ifdef SLAKE_PAIR_KERNEL
  const int64_t nb = K / 32;
  if (rm < kRows16) {  // the kernel reads 16 rows: the rest as zero rows (scale 0)
    thread_local std::vector<uint8_t> pad;
    const size_t rb = static_cast<size_t>(nb) * 34;
    pad.assign(rb * kRows16, 0);
    for (int i = 0; i < rm; ++i) std::memcpy(pad.data() + i * rb, w + i * w_stride, rb);
    w = pad.data();
    w_stride = rb;
  }
  // Activation rows four at a time; each pair's row scales gathered once for them.
  for (int j0 = 0; j0 < rn; j0 += 4) {
    const int n = std::min(4, rn - j0);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t b = 0; b < nb; b += 2) {
      const bool pair = b + 1 < nb;
      const __m512 d0 = rows16_scales(w + b * 34, w_stride);
      const __m512 d1 = pair ? rows16_scales(w + (b + 1) * 34, w_stride) : _mm512_setzero_ps();
      for (int j = 0; j < n; ++j) {
        const uint8_t* a = act + (j0 + j) * act_stride + b * 34;
        __m512i s0, s1;
        rows16_pair(w + b * 34, w_stride, a, pair, &s0, &s1);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(d0, _mm512_set1_ps(_cvtsh_ss(load_u16(a)))), acc[j]);
        if (pair)
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(d1, _mm512_set1_ps(_cvtsh_ss(load_u16(a + 34)))), acc[j]);
      }
    }
    for (int j = 0; j < n; ++j) {
      alignas(64) float sums[kRows16];
      _mm512_store_ps(sums, acc[j]);
      std::copy(sums, sums + rm, out + (j0 + j) * out_stride);
    }
  }
#else
  const int step = tile_rows_max(DType::Q8_0);
  for (int j = 0; j < rn; j += kTileTokens)
    for (int i = 0; i < rm; i += step)
      dot_tile(DType::Q8_0, K, w + i * w_stride, w_stride, std::min(step, rm - i), act + j * act_stride, act_stride,
               std::min(kTileTokens, rn - j), out + j * out_stride + i, out_stride);
#endif
}

}  // namespace slake
