// Byte layouts of the quantised weight blocks that both dequantisation (dtype.cpp) and the dot
// products (quant_dot*.cpp, dot_*.cpp) read: ggml's block_* structs, as byte offsets.
//   32-element blocks: Q4_0 18 bytes, Q4_1 20, Q5_0 22, Q5_1 24, Q8_0 34, IQ4_NL 18.
//   256-element super-blocks: Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210, IQ4_XS 136.
#pragma once
#include <cstdint>
#include <cstring>

#include "slake/quant/dtype.h"

namespace slake::quant {

constexpr int kQK = 256;  // elements of a K-quant super-block

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// --- 32-element blocks ---------------------------------------------------------------------
// Q4_0: d, qs[16].  Q4_1: d, m, qs[16].  Q5_0: d, qh[4], qs[16].  Q5_1: d, m, qh[4], qs[16].
// IQ4_NL: d, qs[16]. d and m are fp16; element j < 16 is the low nibble of qs[j], element j + 16
// its high nibble; the fifth bit of Q5 element j is bit j of qh (little-endian 32 bits).
constexpr int kQ4_1_QS = 4, kQ5_0_QH = 2, kQ5_0_QS = 6, kQ5_1_QH = 4, kQ5_1_QS = 8, kIQ4NL_QS = 2;

// The 16 values an IQ4 nibble stands for (ggml's kvalues_iq4nl).
constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 32 nibbles of a 4-bit block, element order.
inline void unpack_nibbles32(const uint8_t* qs, int q[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0xF;
    q[j + 16] = qs[j] >> 4;
  }
}

// q[j] |= 16 where element j's fifth bit is set.
inline void add_fifth_bits(const uint8_t* qh, int q[32]) {
  const uint32_t h = load_u32(qh);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((h >> j) & 1) << 4;
}

// --- 256-element super-blocks ----------------------------------------------------------------

// 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (ggml's get_scale_min_k4).
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q2_K: scales[16] (4-bit scale low, 4-bit min high, per 16 elements), qs[64], d, dmin (fp16).
constexpr int kQ2K_SCALES = 0, kQ2K_QS = 16, kQ2K_D = 80, kQ2K_DMIN = 82;
// Q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales, offset 32), d (fp16).
constexpr int kQ3K_HMASK = 0, kQ3K_QS = 32, kQ3K_SCALES = 96, kQ3K_D = 108;
// Q4_K: d (fp16), dmin (fp16), scales[12], qs[128]; 64 elements per 32 bytes of qs, the low
// nibbles first.
constexpr int kQ4K_D = 0, kQ4K_DMIN = 2, kQ4K_SCALES = 4, kQ4K_QS = 16;
// Q5_K: as Q4_K, with qh[32] (element e's fifth bit is bit e / 32 of qh[e % 32]) before qs.
constexpr int kQ5K_D = 0, kQ5K_DMIN = 2, kQ5K_SCALES = 4, kQ5K_QH = 16, kQ5K_QS = 48;
// Q6_K: ql[128], qh[64], scales[16] (int8), d (fp16).
constexpr int kQ6K_QL = 0, kQ6K_QH = 128, kQ6K_SCALES = 192, kQ6K_D = 208;

// The byte offsets of a block's fp16 fields: d, and m or dmin where the type has one.
struct Fp16Fields {
  int n;
  int off[2];
  const int* begin() const { return off; }
  const int* end() const { return off + n; }
};
inline Fp16Fields fp16_fields(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1: return {2, {0, 2}};
    case DType::Q2_K: return {2, {kQ2K_D, kQ2K_DMIN}};
    case DType::Q3_K: return {1, {kQ3K_D, 0}};
    case DType::Q4_K: return {2, {kQ4K_D, kQ4K_DMIN}};
    case DType::Q5_K: return {2, {kQ5K_D, kQ5K_DMIN}};
    case DType::Q6_K: return {1, {kQ6K_D, 0}};
    default: return {1, {0, 0}};  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first
  }
}
// IQ4_XS: d (fp16), scales_h (u16: 2 high bits per 32 elements), scales_l[4] (4 low bits per 32
// elements), qs[128] (per 32 elements, 16 bytes: low nibbles, then high nibbles).
constexpr int kIQ4XS_D = 0, kIQ4XS_SCALES_H = 2, kIQ4XS_SCALES_L = 4, kIQ4XS_QS = 8;

// The 2-bit quant (0..3) of element e of a Q2_K block: per 128 elements, 32 bytes hold four
// 32-element runs at shifts 0, 2, 4, 6.
inline int q2k_quant(const uint8_t* b, int e) {
  const int h = e / 128, r = e % 128;
  return (b[kQ2K_QS + h * 32 + r % 32] >> (2 * (r / 32))) & 3;
}

// The quant (-4..3) of element e of a Q3_K block: its 2 low bits as Q2_K's, minus 4 where its
// hmask bit is clear.
inline int q3k_quant(const uint8_t* b, int e) {
  const int h = e / 128, r = e % 128;
  const int low = (b[kQ3K_QS + h * 32 + r % 32] >> (2 * (r / 32))) & 3;
  const int high = (b[kQ3K_HMASK + e % 32] >> (e / 32)) & 1;
  return low - (high ? 0 : 4);
}

// The scale (-32..31) of the 16 elements of group g of a Q3_K block.
inline int q3k_scale(const uint8_t* b, int g) {
  const uint8_t* s = b + kQ3K_SCALES;
  const int low = (s[g % 8] >> (4 * (g / 8))) & 0xF;
  const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The 5-bit quant (0..31) of element e of a Q5_K block.
inline int q5k_quant(const uint8_t* b, int e) {
  const int j = e / 32, l = e % 32;
  const int low = (b[kQ5K_QS + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
  const int high = (b[kQ5K_QH + l] >> j) & 1;
  return low | (high << 4);
}

// The scale (-32..31) of the 32 elements of sub-block j of an IQ4_XS block.
inline int iq4xs_scale(const uint8_t* b, int j) {
  const int low = (b[kIQ4XS_SCALES_L + j / 2] >> (4 * (j % 2))) & 0xF;
  const int high = (load_u16(b + kIQ4XS_SCALES_H) >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

// The value (one of kIQ4Values) of element e of an IQ4_XS block.
inline int iq4xs_value(const uint8_t* b, int e) {
  const int j = e / 32, l = e % 32;
  return kIQ4Values[(b[kIQ4XS_QS + 16 * j + l % 16] >> (4 * (l / 16))) & 0xF];
}

// The 6-bit quant (0..63) of element e of a Q6_K block.
inline int q6k_quant(const uint8_t* b, int e) {
  const int h = e / 128, r = e % 128;
  const int lo = (b[kQ6K_QL + h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
  const int hi = (b[kQ6K_QH + h * 32 + r % 32] >> (2 * (r / 32))) & 0x3;
  return lo | (hi << 4);
}

}  // namespace slake::quant
