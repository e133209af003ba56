// Activation preparation (ggml's quantize_row_q8_0 / q8_K, rounding half to even as its SIMD
// quantisers and nearest_int do) and the portable dot
// products: plain integer arithmetic per block, the reference for the SIMD kernels.
#include "slake/quant/quant_dot.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "slake/quant/quant_blocks.h"
#include "slake/error.h"
#include "slake/quant/weight_pack.h"

namespace slake {

using quant::load_u16;

ActFormat act_format(DType weight) {
  switch (weight) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL: return ActFormat::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return ActFormat::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return ActFormat::Q8_K;
    default: return ActFormat::F32;
  }
}

ActFormat act_format(DType weight, WeightLayout layout) {
  return layout == WeightLayout::X16 && x16_block32_type(weight) ? ActFormat::Q8_1 : act_format(weight);
}

size_t act_row_bytes(ActFormat f, int64_t n) {
  switch (f) {
    case ActFormat::Q8_0: return static_cast<size_t>(n / 32) * sizeof(ActBlockQ8_0);
    case ActFormat::Q8_1: return static_cast<size_t>(n / 32) * sizeof(ActBlockQ8_1);
    case ActFormat::Q8_K: return static_cast<size_t>(n / quant::kQK) * sizeof(ActBlockQ8_K);
    default: return static_cast<size_t>(n) * sizeof(float);
  }
}

namespace {

void quantize_q8_0(const float* x, ActBlockQ8_0* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));  // vectorises; lround is a call
  }
}

void quantize_q8_1(const float* x, ActBlockQ8_1* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp16_to_fp32(fp32_to_fp16(d));
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      sum += y[b].qs[j];
    }
    y[b].s = y[b].d * static_cast<float>(sum);
  }
}

void quantize_q8_k(const float* x, ActBlockQ8_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += quant::kQK) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < quant::kQK; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    std::memset(&y[b], 0, sizeof(ActBlockQ8_K));
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / max;
    for (int j = 0; j < quant::kQK; ++j) {
      const float v = std::nearbyint(iscale * x[j]);
      y[b].qs[j] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, v)));
    }
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y[b].qs[g * 16 + j];
      y[b].bsums[g] = static_cast<int16_t>(s);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace

void quantize_act_row(ActFormat f, const float* x, void* dst, int64_t n) {
  switch (f) {
    case ActFormat::Q8_0: quantize_q8_0(x, static_cast<ActBlockQ8_0*>(dst), n / 32); return;
    case ActFormat::Q8_1: quantize_q8_1(x, static_cast<ActBlockQ8_1*>(dst), n / 32); return;
    case ActFormat::Q8_K: quantize_q8_k(x, static_cast<ActBlockQ8_K*>(dst), n / quant::kQK); return;
    default: std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float)); return;
  }
}

void dequantize_act_row(ActFormat f, const void* src, float* dst, int64_t n) {
  if (f == ActFormat::Q8_0) {
    const auto* b = static_cast<const ActBlockQ8_0*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(b[i / 32].d) * b[i / 32].qs[i % 32];
  } else if (f == ActFormat::Q8_1) {
    const auto* b = static_cast<const ActBlockQ8_1*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = b[i / 32].d * b[i / 32].qs[i % 32];
  } else if (f == ActFormat::Q8_K) {
    const auto* b = static_cast<const ActBlockQ8_K*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = b[i / quant::kQK].d * b[i / quant::kQK].qs[i % quant::kQK];
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

namespace portable {
namespace {

float dot_float_weights(DType t, int64_t K, const uint8_t* w, const float* x) {
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    float wk;
    if (t == DType::F32) {
      std::memcpy(&wk, w + 4 * k, 4);
    } else {
      const uint16_t h = load_u16(w + 2 * k);
      wk = t == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    sum += wk * x[k];
  }
  return sum;
}

// Q8_0 and Q4_0 weights against Q8_0 activations: one integer sum per 32-block. The quants are
// unpacked first (a branch inside the product loop is miscompiled by GCC 12 at -O3 -march=native).
float dot_q8_0_q4_0(DType t, int64_t K, const uint8_t* w, const ActBlockQ8_0* a) {
  const size_t bytes = t == DType::Q8_0 ? 34 : 18;
  float sum = 0.0f;
  for (int64_t b = 0; b < K / 32; ++b, w += bytes) {
    int q[32];
    if (t == DType::Q8_0) {
      for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(w[2 + j]);
    } else {
      for (int j = 0; j < 16; ++j) {
        q[j] = (w[2 + j] & 0xF) - 8;
        q[j + 16] = (w[2 + j] >> 4) - 8;
      }
    }
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += q[j] * a[b].qs[j];
    sum += static_cast<float>(isum) * (fp16_to_fp32(load_u16(w)) * fp16_to_fp32(a[b].d));
  }
  return sum;
}

// Q4_K: d * sc_j * q - dmin * m_j per sub-block j of 32; the mins meet the activation sums.
float dot_q4_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 144) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      quant::q4k_scale_min(j, w + quant::kQ4K_SCALES, &sc, &m);
      const uint8_t* qs = w + quant::kQ4K_QS + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += ((qs[l] >> shift) & 0xF) * a[b].qs[32 * j + l];
      isum += sc * s;
      msum += m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
    }
    sum += a[b].d * (fp16_to_fp32(load_u16(w + quant::kQ4K_D)) * static_cast<float>(isum) -
                     fp16_to_fp32(load_u16(w + quant::kQ4K_DMIN)) * static_cast<float>(msum));
  }
  return sum;
}

// Q6_K: d * sc_g * (q - 32) per group g of 16.
float dot_q6_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 210) {
    const auto* sc = reinterpret_cast<const int8_t*>(w + quant::kQ6K_SCALES);
    int32_t isum = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += (quant::q6k_quant(w, 16 * g + l) - 32) * a[b].qs[16 * g + l];
      isum += sc[g] * s;
    }
    sum += a[b].d * fp16_to_fp32(load_u16(w + quant::kQ6K_D)) * static_cast<float>(isum);
  }
  return sum;
}

// The 32-element types with their quants q and scale d (and min m): d * q (+ m) per element.
// Q5_0 and IQ4_NL meet Q8_0 activations: d_w d_a sum q a. Q4_1 and Q5_1 meet Q8_1: the min
// adds m_w s_a, s_a = d_a sum a.
int unpack_block32(DType t, const uint8_t* w, int q[32]) {  // returns the byte size
  switch (t) {
    case DType::Q4_1: quant::unpack_nibbles32(w + quant::kQ4_1_QS, q); return 20;
    case DType::Q5_0:
      quant::unpack_nibbles32(w + quant::kQ5_0_QS, q);
      quant::add_fifth_bits(w + quant::kQ5_0_QH, q);
      for (int j = 0; j < 32; ++j) q[j] -= 16;
      return 22;
    case DType::Q5_1:
      quant::unpack_nibbles32(w + quant::kQ5_1_QS, q);
      quant::add_fifth_bits(w + quant::kQ5_1_QH, q);
      return 24;
    default:  // IQ4_NL
      quant::unpack_nibbles32(w + quant::kIQ4NL_QS, q);
      for (int j = 0; j < 32; ++j) q[j] = quant::kIQ4Values[q[j]];
      return 18;
  }
}

float dot_block32(DType t, int64_t K, const uint8_t* w, const uint8_t* act) {
  const bool with_min = t == DType::Q4_1 || t == DType::Q5_1;
  float sum = 0.0f;
  for (int64_t b = 0; b < K / 32; ++b) {
    int q[32];
    const int bytes = unpack_block32(t, w, q);
    const int8_t* aq;
    float da;
    if (with_min) {
      const auto& a = reinterpret_cast<const ActBlockQ8_1*>(act)[b];
      aq = a.qs;
      da = a.d;
    } else {
      const auto& a = reinterpret_cast<const ActBlockQ8_0*>(act)[b];
      aq = a.qs;
      da = fp16_to_fp32(a.d);
    }
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += q[j] * aq[j];
    sum += static_cast<float>(isum) * (fp16_to_fp32(load_u16(w)) * da);
    if (with_min) sum += fp16_to_fp32(load_u16(w + 2)) * reinterpret_cast<const ActBlockQ8_1*>(act)[b].s;
    w += bytes;
  }
  return sum;
}

// Q2_K: d * sc_g * q - dmin * m_g per group g of 16; the mins meet the activation sums.
float dot_q2_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 84) {
    int32_t isum = 0, msum = 0;
    for (int g = 0; g < 16; ++g) {
      const uint8_t sc = w[quant::kQ2K_SCALES + g];
      int s = 0;
      for (int l = 0; l < 16; ++l) s += quant::q2k_quant(w, 16 * g + l) * a[b].qs[16 * g + l];
      isum += (sc & 0xF) * s;
      msum += (sc >> 4) * a[b].bsums[g];
    }
    sum += a[b].d * (fp16_to_fp32(load_u16(w + quant::kQ2K_D)) * static_cast<float>(isum) -
                     fp16_to_fp32(load_u16(w + quant::kQ2K_DMIN)) * static_cast<float>(msum));
  }
  return sum;
}

// Q3_K: d * sc_g * q per group g of 16, q in -4..3.
float dot_q3_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 110) {
    int32_t isum = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += quant::q3k_quant(w, 16 * g + l) * a[b].qs[16 * g + l];
      isum += quant::q3k_scale(w, g) * s;
    }
    sum += a[b].d * fp16_to_fp32(load_u16(w + quant::kQ3K_D)) * static_cast<float>(isum);
  }
  return sum;
}

// Q5_K: Q4_K with a fifth bit.
float dot_q5_k(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 176) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      quant::q4k_scale_min(j, w + quant::kQ5K_SCALES, &sc, &m);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += quant::q5k_quant(w, 32 * j + l) * a[b].qs[32 * j + l];
      isum += sc * s;
      msum += m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
    }
    sum += a[b].d * (fp16_to_fp32(load_u16(w + quant::kQ5K_D)) * static_cast<float>(isum) -
                     fp16_to_fp32(load_u16(w + quant::kQ5K_DMIN)) * static_cast<float>(msum));
  }
  return sum;
}

// IQ4_XS: d * (ls_j - 32) * value per sub-block j of 32.
float dot_iq4_xs(int64_t K, const uint8_t* w, const ActBlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t b = 0; b < K / quant::kQK; ++b, w += 136) {
    int32_t isum = 0;
    for (int j = 0; j < 8; ++j) {
      int s = 0;
      for (int l = 0; l < 32; ++l) s += quant::iq4xs_value(w, 32 * j + l) * a[b].qs[32 * j + l];
      isum += quant::iq4xs_scale(w, j) * s;
    }
    sum += a[b].d * fp16_to_fp32(load_u16(w + quant::kIQ4XS_D)) * static_cast<float>(isum);
  }
  return sum;
}

float vec_dot(DType t, int64_t K, const uint8_t* w, const uint8_t* act) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return dot_float_weights(t, K, w, reinterpret_cast<const float*>(act));
    case DType::Q8_0:
    case DType::Q4_0: return dot_q8_0_q4_0(t, K, w, reinterpret_cast<const ActBlockQ8_0*>(act));
    case DType::Q4_K: return dot_q4_k(K, w, reinterpret_cast<const ActBlockQ8_K*>(act));
    case DType::Q6_K: return dot_q6_k(K, w, reinterpret_cast<const ActBlockQ8_K*>(act));
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return dot_block32(t, K, w, act);
    case DType::Q2_K: return dot_q2_k(K, w, reinterpret_cast<const ActBlockQ8_K*>(act));
    case DType::Q3_K: return dot_q3_k(K, w, reinterpret_cast<const ActBlockQ8_K*>(act));
    case DType::Q5_K: return dot_q5_k(K, w, reinterpret_cast<const ActBlockQ8_K*>(act));
    case DType::IQ4_XS: return dot_iq4_xs(K, w, reinterpret_cast<const ActBlockQ8_K*>(act));
  }
  fail(std::string("no dot product for weight type ") + dtype_name(t));
}

}  // namespace

void dot_tile(DType t, int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride,
              int rn, float* out, int64_t out_stride) {
  for (int j = 0; j < rn; ++j)
    for (int i = 0; i < rm; ++i)
      out[j * out_stride + i] = vec_dot(t, K, w + i * w_stride, act + j * act_stride);
}

namespace {
// The reference for a repacked group: its rows gathered back into the file's layout, then dot_tile.
void dot_tile_gathered(DType t, WeightLayout layout, int rows, int64_t K, const uint8_t* group, const uint8_t* act,
                       size_t act_stride, int rn, float* out, int64_t out_stride) {
  TensorView v;
  v.type = t;
  v.ne = {K, rows};
  v.data = group;
  v.layout = layout;
  const size_t rb = row_bytes(t, K);
  std::vector<uint8_t> gathered(static_cast<size_t>(rows) * rb);
  for (int i = 0; i < rows; ++i) unpack_row(v, i, gathered.data() + i * rb);
  std::vector<uint8_t> q8_0;  // Q8_1 activations (act_format for the layout) back to the rows' Q8_0
  if (act_format(t, layout) != act_format(t)) {
    const int64_t nb = K / 32;
    q8_0.resize(static_cast<size_t>(rn * nb) * sizeof(ActBlockQ8_0));
    auto* dst = reinterpret_cast<ActBlockQ8_0*>(q8_0.data());
    for (int j = 0; j < rn; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const auto& src = reinterpret_cast<const ActBlockQ8_1*>(act + static_cast<size_t>(j) * act_stride)[b];
        dst[j * nb + b].d = fp32_to_fp16(src.d);  // src.d is an fp16 value: exact
        std::memcpy(dst[j * nb + b].qs, src.qs, 32);
      }
    act = q8_0.data();
    act_stride = static_cast<size_t>(nb) * sizeof(ActBlockQ8_0);
  }
  portable::dot_tile(t, K, gathered.data(), rb, rows, act, act_stride, rn, out, out_stride);
}
}  // namespace

void dot_tile_x4(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride) {
  dot_tile_gathered(t, WeightLayout::X4, kGroupRows, K, group, act, act_stride, rn, out, out_stride);
}

void dot_tile_x8(int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride) {
  dot_tile_gathered(DType::Q4_0, WeightLayout::X8, kGroupRowsX8, K, group, act, act_stride, rn, out, out_stride);
}

void dot_tile_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                  int64_t out_stride) {
  dot_tile_gathered(t, WeightLayout::X16, kGroupRowsX16, K, group, act, act_stride, rn, out, out_stride);
}

}  // namespace portable

}  // namespace slake
