// Byte layouts of the quantised weight blocks that both dequantisation (dtype.cpp) and the dot
// products (quant_dot*.cpp) read. Sizes: Q4_0 18 bytes per 32, Q8_0 34 per 32, Q4_K 144 per 256,
// Q6_K 210 per 256 (ggml's block_q4_0, block_q8_0, block_q4_K, block_q6_K).
#pragma once
#include <cstdint>
#include <cstring>

namespace slake::quant {

constexpr int kQK = 256;  // elements of a K-quant super-block

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// 6-bit scale and min of sub-block j of a Q4_K block (ggml's get_scale_min_k4).
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K: d (fp16), dmin (fp16), scales[12], qs[128]; 64 elements per 32 bytes of qs, the low
// nibbles first.
constexpr int kQ4K_D = 0, kQ4K_DMIN = 2, kQ4K_SCALES = 4, kQ4K_QS = 16;
// Q6_K: ql[128], qh[64], scales[16] (int8), d (fp16).
constexpr int kQ6K_QL = 0, kQ6K_QH = 128, kQ6K_SCALES = 192, kQ6K_D = 208;

// The 6-bit quant (0..63) of element e of a Q6_K block.
inline int q6k_quant(const uint8_t* b, int e) {
  const int h = e / 128, r = e % 128;
  const int lo = (b[kQ6K_QL + h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
  const int hi = (b[kQ6K_QH + h * 32 + r % 32] >> (2 * (r / 32))) & 0x3;
  return lo | (hi << 4);
}

}  // namespace slake::quant
