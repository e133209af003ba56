// Prompt-sized products of Q8_0/Q4_0 weights with Q8_0 activations on Intel AMX (tile matrix
// multiply, int8): 16 tokens x 16 rows x one 32-block per TDPBSSD. The int32 tile of each block is
// scaled by the activation and weight block scales and summed in fp32, so the result is the
// same integer-then-scale arithmetic as the VNNI kernels (quant_dot_simd.cpp). Weights are
// repacked per 16-row group into the tile's VNNI layout (B[k/4][n][k%4]) once per product and
// reused by every 16-token group.
#include "matmul_amx.h"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "slake/quant/quant_blocks.h"

namespace slake {

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512F__) && defined(__AVX512BW__)

namespace {

// Linux hands out the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM).
bool request_amx() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0: C, 16 x 16 int32; tmm1: A, 16 tokens x 32 int8; tmm2: B, 8 x (16 rows x 4 int8).
void load_tile_config() {
  TileConfig c;
  c.colsb[0] = 64;
  c.rows[0] = 16;
  c.colsb[1] = 32;
  c.rows[1] = 16;
  c.colsb[2] = 64;
  c.rows[2] = 8;
  _tile_loadconfig(&c);
}

// The 32 signed quants of block b of 16 rows, transposed to the B-tile layout, and the 16 row
// scales.
void pack_block(bool q4, const uint8_t* w, size_t ws, int64_t b, int8_t* B, float* scales) {
  const size_t wb = q4 ? 18 : 34;
  alignas(64) int8_t q[16][32];
  for (int n = 0; n < 16; ++n) {
    const uint8_t* p = w + n * ws + b * wb;
    scales[n] = _cvtsh_ss(quant::load_u16(p));
    if (q4) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
      const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
      _mm_store_si128(reinterpret_cast<__m128i*>(q[n]), _mm_sub_epi8(_mm_and_si128(raw, m4), eight));
      _mm_store_si128(reinterpret_cast<__m128i*>(q[n] + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), eight));
    } else {
      std::memcpy(q[n], p + 2, 32);
    }
  }
  // B as int32 [8][16]: B[kk][n] = quants 4kk..4kk+3 of row n.
  auto* Bi = reinterpret_cast<int32_t*>(B);
  for (int n = 0; n < 16; ++n) {
    int32_t row[8];
    std::memcpy(row, q[n], 32);
    for (int kk = 0; kk < 8; ++kk) Bi[kk * 16 + n] = row[kk];
  }
}

}  // namespace

bool amx_available() {
  static const bool ok = [] {
    const char* off = std::getenv("SLAKE_NO_AMX");
    if (off != nullptr && *off != '\0' && *off != '0') return false;
    return request_amx();
  }();
  return ok;
}

void amx_rows_q8(bool q4, int64_t K, const uint8_t* w, size_t ws, int64_t rows, const uint8_t* act, size_t as,
                 const float* act_scales, int64_t n_tokens, float* out, int64_t os) {
  const int64_t nb = K / 32;
  thread_local std::vector<int8_t> packed;
  thread_local std::vector<float> scales;
  packed.resize(static_cast<size_t>(nb) * 512 + 64);
  scales.resize(static_cast<size_t>(nb) * 16);
  auto* B = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) & ~uintptr_t{63});
  load_tile_config();
  alignas(64) int32_t C[16][16];
  for (int64_t r0 = 0; r0 + 16 <= rows; r0 += 16) {
    const uint8_t* wr = w + static_cast<size_t>(r0) * ws;
    for (int64_t b = 0; b < nb; ++b) pack_block(q4, wr, ws, b, B + b * 512, &scales[static_cast<size_t>(b * 16)]);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 16) {
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      const uint8_t* at = act + static_cast<size_t>(t0) * as;
      for (int64_t b = 0; b < nb; ++b) {
        _tile_zero(0);
        _tile_loadd(1, at + b * 34 + 2, static_cast<long>(as));
        _tile_loadd(2, B + b * 512, 64);
        _tile_dpbssd(0, 1, 2);
        _tile_stored(0, C, 64);
        const __m512 ws16 = _mm512_loadu_ps(&scales[static_cast<size_t>(b * 16)]);
        for (int t = 0; t < 16; ++t) {
          const __m512 s = _mm512_mul_ps(ws16, _mm512_set1_ps(act_scales[(t0 + t) * nb + b]));
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(C[t])), s, acc[t]);
        }
      }
      const int64_t tn = std::min<int64_t>(16, n_tokens - t0);
      for (int64_t t = 0; t < tn; ++t) _mm512_storeu_ps(out + (t0 + t) * os + r0, acc[t]);
    }
  }
  _tile_release();
}

#else

bool amx_available() { return false; }
void amx_rows_q8(bool, int64_t, const uint8_t*, size_t, int64_t, const uint8_t*, size_t, const float*, int64_t, float*,
                 int64_t) {}

#endif

}  // namespace slake
