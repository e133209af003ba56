// The X16 layout's kernels for the 32-element types Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0
// (AVX-512 VNNI): 16 rows per group, one row per 32-bit lane (quant_dot.h), any K that is a
// multiple of 32. A block costs a token 8 dpbusd over all 16 rows, each meeting 4 activation bytes
// broadcast from memory, and no horizontal sum. The X4 tiles take Q4_0 and Q8_0 alone, and Q4_0's
// need whole runs of 128 elements (SmolLM2's rows of 576 and Gemma-3's of 640 are not); the row
// kernels unpack a row's block once per 4 tokens and end each row in a horizontal sum. Q8_0's X4
// tiles unpack a block once per 4 tokens; the prompt kernel here, once per 64.
//
// The quants enter dpbusd unsigned, u = value + offset (Q4_0 the nibble, offset 8; Q5_0 the nibble
// and fifth bit, 16; IQ4_NL the table's value + 128; Q8_0 the byte with its sign bit flipped, 128), so a block's sum over a token is
// d_w (d_a sum u a - offset s_a), where s_a = d_a sum a comes with the Q8_1 activations
// (act_format for the layout: the quants and d of Q8_0); Q4_1 and Q5_1 are d_w u + m_w, so
// theirs is d_w d_a sum u a + m_w s_a. Per token, the blocks of a chunk of kChunk
// add up in one fp32 sum, which is then added to the token's total: the prompt kernel, which
// unpacks a chunk once for every token, and the tile kernel round alike, and a token's result does
// not depend on the other tokens.
#include <algorithm>
#include <string>

#include "dot_simd_internal.h"
#include "simd_util.h"
#include "slake/error.h"
#include "slake/quant/quant_dot.h"

#if defined(SLAKE_SIMD_DOT) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

namespace slake::simd {

namespace {

constexpr int kChunk = 8;  // blocks per partial sum: 256 elements, as a K-quant block

inline const ActBlockQ8_1& act_block(const uint8_t* act, size_t as, int64_t j, int64_t b) {
  return reinterpret_cast<const ActBlockQ8_1*>(act + static_cast<size_t>(j) * as)[b];
}

// A group's block as 8 vectors of unsigned quants: u[w] elements 4w..4w+3 of the 16 rows (the low
// nibbles of qs word w), u[4 + w] elements 16+4w.. (the high ones), so u[q] meets activation bytes
// 4q..4q+3.
template <DType T>
struct Block;

inline void nibbles(const uint8_t* qs, __m512i (&u)[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int w = 0; w < 4; ++w) {
    const __m512i v = load512(qs + 64 * w);
    u[w] = _mm512_and_si512(v, m4);
    u[4 + w] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
}

// Q4_0 and Q4_1 leave the high nibbles in place (16 u, one operation a word fewer): their sum is
// 16 times theirs, exactly, and shifts back by 4 once per block (kHigh16).
inline void nibbles16(const uint8_t* qs, __m512i (&u)[8]) {
  for (int w = 0; w < 4; ++w) {
    const __m512i v = load512(qs + 64 * w);
    u[w] = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    u[4 + w] = _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xF0)));
  }
}

// Element e's fifth bit (Q5_0, Q5_1) is bit e of the row's qh word. Vector q's 4 elements
// 4q..4q+3 (low nibbles, q < 4) or 16+4(q-4).. (high) take their bits from byte e / 8 of the word:
// the shuffle copies that byte to the lane's 4 bytes, and byte j tests bit e % 8 + j.
inline void fifth_bits(const uint8_t* qh, __m512i (&u)[8]) {
  const __m512i h = load512(qh);
  // Byte k of every 32-bit lane i of a 128-bit lane: 4 (i % 4), the lane's first byte.
  const __m512i base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int q = 0; q < 8; ++q) {
    const int e = q < 4 ? 4 * q : 16 + 4 * (q - 4);  // the vector's first element
    const __m512i spread = _mm512_shuffle_epi8(h, _mm512_add_epi8(base, _mm512_set1_epi8(static_cast<char>(e / 8))));
    const __mmask64 bit = _mm512_test_epi8_mask(spread, _mm512_set1_epi32(e % 8 == 0 ? 0x08040201 : static_cast<int>(0x80402010u)));
    u[q] = _mm512_mask_add_epi8(u[q], bit, u[q], sixteen);
  }
}

// Each type: its group block's bytes, the offset o of its unsigned quants (Q4_1 and Q5_1 have a
// min instead: kMin, its fp16 lanes at 32), kHigh16, and the unpacking.
template <>
struct Block<DType::Q4_0> {
  static constexpr size_t kBytes = 16 * 18;
  static constexpr float kOffset = 8.0f;
  static constexpr bool kMin = false, kHigh16 = true;
  static void unpack(const uint8_t* g, __m512i (&u)[8]) { nibbles16(g + 32, u); }
};

// Q8_0's quants are bytes already: each word of the 16 rows enters as it is, its sign bit flipped.
template <>
struct Block<DType::Q8_0> {
  static constexpr size_t kBytes = 16 * 34;
  static constexpr float kOffset = 128.0f;
  static constexpr bool kMin = false, kHigh16 = false;
  static void unpack(const uint8_t* g, __m512i (&u)[8]) {
    const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int q = 0; q < 8; ++q) u[q] = _mm512_xor_si512(load512(g + 32 + 64 * q), sign);
  }
};

template <>
struct Block<DType::Q4_1> {
  static constexpr size_t kBytes = 16 * 20;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kMin = true, kHigh16 = true;
  static void unpack(const uint8_t* g, __m512i (&u)[8]) { nibbles16(g + 64, u); }
};

template <>
struct Block<DType::Q5_0> {
  static constexpr size_t kBytes = 16 * 22;
  static constexpr float kOffset = 16.0f;
  static constexpr bool kMin = false, kHigh16 = false;
  static void unpack(const uint8_t* g, __m512i (&u)[8]) {
    nibbles(g + 96, u);
    fifth_bits(g + 32, u);
  }
};

template <>
struct Block<DType::Q5_1> {
  static constexpr size_t kBytes = 16 * 24;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kMin = true, kHigh16 = false;
  static void unpack(const uint8_t* g, __m512i (&u)[8]) {
    nibbles(g + 128, u);
    fifth_bits(g + 64, u);
  }
};

template <>
struct Block<DType::IQ4_NL> {
  static constexpr size_t kBytes = 16 * 18;
  static constexpr float kOffset = 128.0f;
  static constexpr bool kMin = false, kHigh16 = false;
  static void unpack(const uint8_t* g, __m512i (&u)[8]) {
    const __m512i table = iq4_table512();
    nibbles(g + 32, u);
    for (int q = 0; q < 8; ++q) u[q] = _mm512_shuffle_epi8(table, u[q]);
  }
};

// A block's per-row fp32 factors: the scale d_w, and Q4_1's and Q5_1's min m_w.
struct Scales {
  __m512 d, m;
};
template <DType T>
inline Scales scales(const uint8_t* g) {
  return {f16_lanes(g), Block<T>::kMin ? f16_lanes(g + 32) : _mm512_setzero_ps()};
}

// A token's partial sum gains a block, per row: d_w (d_a (sum u a) - o s_a) (o s_a is exact, the
// offset being a power of two), or with a min d_w d_a (sum u a) + m_w s_a. Two chains of 4 dpbusd.
template <DType T>
inline __m512 add_block(__m512 part, const __m512i (&u)[8], const Scales& w, const ActBlockQ8_1& a) {
  __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
  for (int q = 0; q < 4; ++q) {
    lo = _mm512_dpbusd_epi32(lo, u[q], bcast32(a.qs + 4 * q));
    hi = _mm512_dpbusd_epi32(hi, u[4 + q], bcast32(a.qs + 16 + 4 * q));
  }
  if (Block<T>::kHigh16) hi = _mm512_srai_epi32(hi, 4);
  const __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi));
  if (Block<T>::kMin)
    return _mm512_fmadd_ps(w.m, _mm512_set1_ps(a.s), _mm512_fmadd_ps(w.d, _mm512_mul_ps(sum, _mm512_set1_ps(a.d)), part));
  const __m512 x = _mm512_fmadd_ps(sum, _mm512_set1_ps(a.d), _mm512_set1_ps(-Block<T>::kOffset * a.s));
  return _mm512_fmadd_ps(w.d, x, part);
}

// Decode and small batches: each block unpacked into registers for the RN tokens.
template <DType T, int RN>
void tile(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, float* out, int64_t os) {
  using B = Block<T>;
  __m512 total[RN];
  for (int j = 0; j < RN; ++j) total[j] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t b1 = std::min<int64_t>(nb, b0 + kChunk);
    __m512 part[RN];
    for (int j = 0; j < RN; ++j) part[j] = _mm512_setzero_ps();
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* g = group + static_cast<size_t>(b) * B::kBytes;
      prefetch_block<B::kBytes, 16, false>(g);
      __m512i u[8];
      B::unpack(g, u);
      const Scales w = scales<T>(g);
      for (int j = 0; j < RN; ++j) part[j] = add_block<T>(part[j], u, w, act_block(act, as, j, b));
    }
    for (int j = 0; j < RN; ++j) total[j] = _mm512_add_ps(total[j], part[j]);
  }
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, total[j]);
}

// Prompts: a chunk's blocks unpacked once, then every token passes over them, RN at a time.
struct Chunk {
  __m512i u[kChunk][8];
  Scales w[kChunk];
  int64_t b0, n;
};

template <DType T, int RN>
void chunk_tokens(const Chunk& C, const uint8_t* act, size_t as, float* out, int64_t os) {
  __m512 part[RN];
  for (int j = 0; j < RN; ++j) part[j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < C.n; ++k)
    for (int j = 0; j < RN; ++j) part[j] = add_block<T>(part[j], C.u[k], C.w[k], act_block(act, as, j, C.b0 + k));
  for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * os, _mm512_add_ps(_mm512_loadu_ps(out + j * os), part[j]));
}

template <DType T>
void group(int64_t nb, const uint8_t* group, const uint8_t* act, size_t as, int64_t n, float* out, int64_t os) {
  using B = Block<T>;
  for (int64_t j = 0; j < n; ++j) _mm512_storeu_ps(out + j * os, _mm512_setzero_ps());
  Chunk C;
  for (C.b0 = 0; C.b0 < nb; C.b0 += kChunk) {
    C.n = std::min<int64_t>(kChunk, nb - C.b0);
    for (int64_t k = 0; k < C.n; ++k) {
      const uint8_t* g = group + static_cast<size_t>(C.b0 + k) * B::kBytes;
      B::unpack(g, C.u[k]);
      C.w[k] = scales<T>(g);
    }
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) chunk_tokens<T, 4>(C, act + static_cast<size_t>(j) * as, as, out + j * os, os);
    switch (n - j) {
      case 3: chunk_tokens<T, 3>(C, act + static_cast<size_t>(j) * as, as, out + j * os, os); break;
      case 2: chunk_tokens<T, 2>(C, act + static_cast<size_t>(j) * as, as, out + j * os, os); break;
      case 1: chunk_tokens<T, 1>(C, act + static_cast<size_t>(j) * as, as, out + j * os, os); break;
      default: break;
    }
  }
}

template <DType T>
void tile_tokens(int64_t nb, const uint8_t* g, const uint8_t* act, size_t as, int rn, float* out, int64_t os) {
  switch (rn) {
    case 1: return tile<T, 1>(nb, g, act, as, out, os);
    case 2: return tile<T, 2>(nb, g, act, as, out, os);
    case 3: return tile<T, 3>(nb, g, act, as, out, os);
    default: return tile<T, 4>(nb, g, act, as, out, os);
  }
}

}  // namespace

void tile_x16_block32(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t as, int rn, float* out,
                      int64_t os) {
  switch (t) {
    case DType::Q4_0: return tile_tokens<DType::Q4_0>(K / 32, group, act, as, rn, out, os);
    case DType::Q8_0: return tile_tokens<DType::Q8_0>(K / 32, group, act, as, rn, out, os);
    case DType::IQ4_NL: return tile_tokens<DType::IQ4_NL>(K / 32, group, act, as, rn, out, os);
    case DType::Q5_0: return tile_tokens<DType::Q5_0>(K / 32, group, act, as, rn, out, os);
    case DType::Q4_1: return tile_tokens<DType::Q4_1>(K / 32, group, act, as, rn, out, os);
    case DType::Q5_1: return tile_tokens<DType::Q5_1>(K / 32, group, act, as, rn, out, os);
    default: fail(std::string("no X16 kernel for ") + dtype_name(t));
  }
}

void group_x16_block32(DType t, int64_t K, const uint8_t* g, const uint8_t* act, size_t as, int64_t n, float* out,
                       int64_t os) {
  switch (t) {
    case DType::Q4_0: return group<DType::Q4_0>(K / 32, g, act, as, n, out, os);
    case DType::Q8_0: return group<DType::Q8_0>(K / 32, g, act, as, n, out, os);
    case DType::IQ4_NL: return group<DType::IQ4_NL>(K / 32, g, act, as, n, out, os);
    case DType::Q5_0: return group<DType::Q5_0>(K / 32, g, act, as, n, out, os);
    case DType::Q4_1: return group<DType::Q4_1>(K / 32, g, act, as, n, out, os);
    case DType::Q5_1: return group<DType::Q5_1>(K / 32, g, act, as, n, out, os);
    default: fail(std::string("no X16 kernel for ") + dtype_name(t));
  }
}

}  // namespace slake::simd

#endif
