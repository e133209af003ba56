#include "slake/quant/dtype.h"

#include <cmath>
#include <cstring>

#if defined(__F16C__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports as
// uninitialised (a false positive of the compiler's own headers; simd_util.h says the same).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include "slake/error.h"
#include "slake/quant/quant_blocks.h"

// This file is compiled with -ffp-contract=off: dequantisation must round like the reference.

namespace slake {

namespace {
constexpr DTypeInfo kF32{"F32", 1, 4};
constexpr DTypeInfo kF16{"F16", 1, 2};
constexpr DTypeInfo kBF16{"BF16", 1, 2};
constexpr DTypeInfo kQ4_0{"Q4_0", 32, 18};
constexpr DTypeInfo kQ8_0{"Q8_0", 32, 34};
constexpr DTypeInfo kQ4_K{"Q4_K", 256, 144};
constexpr DTypeInfo kQ6_K{"Q6_K", 256, 210};
constexpr DTypeInfo kQ4_1{"Q4_1", 32, 20};
constexpr DTypeInfo kQ5_0{"Q5_0", 32, 22};
constexpr DTypeInfo kQ5_1{"Q5_1", 32, 24};
constexpr DTypeInfo kQ2_K{"Q2_K", 256, 84};
constexpr DTypeInfo kQ3_K{"Q3_K", 256, 110};
constexpr DTypeInfo kQ5_K{"Q5_K", 256, 176};
constexpr DTypeInfo kIQ4_NL{"IQ4_NL", 32, 18};
constexpr DTypeInfo kIQ4_XS{"IQ4_XS", 256, 136};

using quant::kQK;
using quant::load_u16;
using quant::q4k_scale_min;

void dequant_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = fp16_to_fp32(load_u16(b));
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(static_cast<int>(qs[j] & 0x0F) - 8);
      y[j + 16] = d * static_cast<float>(static_cast<int>(qs[j] >> 4) - 8);
    }
  }
}

void dequant_q8_0(const uint8_t* b, float* y, int64_t nb) {
  int64_t i = 0;
  // The KV cache's q8_0 rows (a recall store's pages, read at every decode step) come through
  // here: the quants widened in vectors, each product rounded as in the scalar loop below.
#if defined(__AVX512F__) && defined(__F16C__)
  for (; i < nb; ++i, b += 34, y += 32) {
    const __m512 d = _mm512_set1_ps(fp16_to_fp32(load_u16(b)));
    for (int h = 0; h < 2; ++h) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * h)));
      _mm512_storeu_ps(y + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
    }
  }
#elif defined(__AVX2__) && defined(__F16C__)
  for (; i < nb; ++i, b += 34, y += 32) {
    const __m256 d = _mm256_set1_ps(fp16_to_fp32(load_u16(b)));
    for (int h = 0; h < 4; ++h) {
      const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * h)));
      _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
  }
#endif
  for (; i < nb; ++i, b += 34, y += 32) {
    const float d = fp16_to_fp32(load_u16(b));
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
  }
}

void dequant_q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    const float d = fp16_to_fp32(load_u16(b));
    const float dmin = fp16_to_fp32(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    for (int g = 0; g < 4; ++g, qs += 32) {
      for (int half = 0; half < 2; ++half) {
        uint8_t sc, m;
        q4k_scale_min(2 * g + half, scales, &sc, &m);
        const float d1 = d * static_cast<float>(sc);
        const float m1 = dmin * static_cast<float>(m);
        const int shift = 4 * half;
        for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((qs[l] >> shift) & 0xF) - m1;
      }
    }
  }
}

void dequant_q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210, y += kQK) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + quant::kQ6K_SCALES);
    const float d = fp16_to_fp32(load_u16(b + quant::kQ6K_D));
    for (int e = 0; e < kQK; ++e) {
      const int q = quant::q6k_quant(b, e) - 32;
      const float ds = d * static_cast<float>(sc[e / 16]);
      y[e] = ds * static_cast<float>(q);
    }
  }
}
// The 32-element types: element j is d * q_j (+ m where the type has a min), in the reference's
// order of operations.
void dequant_q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
    const float d = fp16_to_fp32(load_u16(b)), m = fp16_to_fp32(load_u16(b + 2));
    int q[32];
    quant::unpack_nibbles32(b + quant::kQ4_1_QS, q);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]) + m;
  }
}

void dequant_q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    const float d = fp16_to_fp32(load_u16(b));
    int q[32];
    quant::unpack_nibbles32(b + quant::kQ5_0_QS, q);
    quant::add_fifth_bits(b + quant::kQ5_0_QH, q);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j] - 16);
  }
}

void dequant_q5_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 24, y += 32) {
    const float d = fp16_to_fp32(load_u16(b)), m = fp16_to_fp32(load_u16(b + 2));
    int q[32];
    quant::unpack_nibbles32(b + quant::kQ5_1_QS, q);
    quant::add_fifth_bits(b + quant::kQ5_1_QH, q);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]) + m;
  }
}

void dequant_iq4_nl(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = fp16_to_fp32(load_u16(b));
    int q[32];
    quant::unpack_nibbles32(b + quant::kIQ4NL_QS, q);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(quant::kIQ4Values[q[j]]);
  }
}

void dequant_q2_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 84, y += kQK) {
    const float d = fp16_to_fp32(load_u16(b + quant::kQ2K_D)), dmin = fp16_to_fp32(load_u16(b + quant::kQ2K_DMIN));
    for (int e = 0; e < kQK; ++e) {
      const uint8_t sc = b[quant::kQ2K_SCALES + e / 16];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      y[e] = dl * static_cast<float>(quant::q2k_quant(b, e)) - ml;
    }
  }
}

void dequant_q3_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 110, y += kQK) {
    const float d = fp16_to_fp32(load_u16(b + quant::kQ3K_D));
    for (int e = 0; e < kQK; ++e) {
      const float dl = d * static_cast<float>(quant::q3k_scale(b, e / 16));
      y[e] = dl * static_cast<float>(quant::q3k_quant(b, e));
    }
  }
}

void dequant_q5_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 176, y += kQK) {
    const float d = fp16_to_fp32(load_u16(b + quant::kQ5K_D)), dmin = fp16_to_fp32(load_u16(b + quant::kQ5K_DMIN));
    for (int e = 0; e < kQK; ++e) {
      uint8_t sc, m;
      q4k_scale_min(e / 32, b + quant::kQ5K_SCALES, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      y[e] = d1 * static_cast<float>(quant::q5k_quant(b, e)) - m1;
    }
  }
}

void dequant_iq4_xs(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 136, y += kQK) {
    const float d = fp16_to_fp32(load_u16(b + quant::kIQ4XS_D));
    for (int e = 0; e < kQK; ++e) {
      const float dl = d * static_cast<float>(quant::iq4xs_scale(b, e / 32));
      y[e] = dl * static_cast<float>(quant::iq4xs_value(b, e));
    }
  }
}
}  // namespace

bool dtype_supported(uint32_t id) {
  switch (static_cast<DType>(id)) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q5_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return true;
  }
  return false;
}

std::string ggml_type_name(uint32_t id) {
  static const char* const names[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3",  "Q5_0",   "Q5_1",  "Q8_0",   "Q8_1", "Q2_K",
      "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8",
      "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (id < sizeof(names) / sizeof(names[0])) return names[id];
  return "type " + std::to_string(id);
}

const DTypeInfo& dtype_info(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    case DType::Q4_0: return kQ4_0;
    case DType::Q8_0: return kQ8_0;
    case DType::Q4_K: return kQ4_K;
    case DType::Q6_K: return kQ6_K;
    case DType::Q4_1: return kQ4_1;
    case DType::Q5_0: return kQ5_0;
    case DType::Q5_1: return kQ5_1;
    case DType::Q2_K: return kQ2_K;
    case DType::Q3_K: return kQ3_K;
    case DType::Q5_K: return kQ5_K;
    case DType::IQ4_NL: return kIQ4_NL;
    case DType::IQ4_XS: return kIQ4_XS;
  }
  fail("internal: unsupported dtype " + std::to_string(static_cast<uint32_t>(t)));
}

float fp16_to_fp32(uint16_t h) {
#if defined(__F16C__)
  // Exact, as below, but that a signalling NaN comes out quiet; the F16 rows of dequantize_row
  // convert so too.
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FF) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7F800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

uint16_t fp32_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00);  // NaN / inf
  if (abs >= 0x477FF000) return sign | 0x7C00;                                // overflow to inf
  if (abs < 0x38800000) {                                                      // subnormal or zero
    if (abs < 0x33000000) return sign;
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs - 0x38000000) >> 13);
  const uint32_t rem = abs & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

uint16_t fp32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t nb = n / dtype_info(t).block_elems;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      int64_t i = 0;
#if defined(__F16C__)  // exact, as fp16_to_fp32; the KV cache's f16 tiles come through here
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i))));
#endif
      for (; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(p + 2 * i));
      return;
    }
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + 2 * i));
      return;
    case DType::Q4_0: return dequant_q4_0(p, dst, nb);
    case DType::Q8_0: return dequant_q8_0(p, dst, nb);
    case DType::Q4_K: return dequant_q4_k(p, dst, nb);
    case DType::Q6_K: return dequant_q6_k(p, dst, nb);
    case DType::Q4_1: return dequant_q4_1(p, dst, nb);
    case DType::Q5_0: return dequant_q5_0(p, dst, nb);
    case DType::Q5_1: return dequant_q5_1(p, dst, nb);
    case DType::Q2_K: return dequant_q2_k(p, dst, nb);
    case DType::Q3_K: return dequant_q3_k(p, dst, nb);
    case DType::Q5_K: return dequant_q5_k(p, dst, nb);
    case DType::IQ4_NL: return dequant_iq4_nl(p, dst, nb);
    case DType::IQ4_XS: return dequant_iq4_xs(p, dst, nb);
  }
  fail("internal: dequantize_row: unsupported dtype");
}

}  // namespace slake
