#include "slake/kv/kv_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "slake/error.h"

namespace slake {

namespace {

constexpr int kBlock = 32;  // q8_0 and q4_0

struct BlockQ8 {
  uint16_t d;
  int8_t qs[kBlock];
};
struct BlockQ4 {
  uint16_t d;
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ8) == 34 && sizeof(BlockQ4) == 18, "ggml block layouts");

// ggml's quantize_row_q8_0_ref (roundf: half away from zero).
void store_q8_0(const float* x, uint8_t* dst, int d) {
  for (int b = 0; b < d / kBlock; ++b, x += kBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float s = amax / 127.0f;
    const float id = s != 0.0f ? 1.0f / s : 0.0f;
    BlockQ8 blk;
    blk.d = fp32_to_fp16(s);
    for (int j = 0; j < kBlock; ++j) blk.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
  }
}

// ggml's quantize_row_q4_0_ref: the signed value of largest magnitude maps to -8.
void store_q4_0(const float* x, uint8_t* dst, int d) {
  for (int b = 0; b < d / kBlock; ++b, x += kBlock) {
    float amax = 0.0f, mx = 0.0f;
    for (int j = 0; j < kBlock; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), mx = x[j];
    const float s = mx / -8.0f;
    const float id = s != 0.0f ? 1.0f / s : 0.0f;
    BlockQ4 blk;
    blk.d = fp32_to_fp16(s);
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kBlock / 2] * id + 8.5f)));
      blk.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
  }
}

}  // namespace

const std::vector<std::string>& kv_type_names() {
  static const std::vector<std::string> names = {"f32", "f16", "bf16", "q8_0", "q4_0", "kivi2", "kivi4"};
  return names;
}

const char* kv_type_name(KvType t) { return kv_type_names()[static_cast<size_t>(t)].c_str(); }

KvType parse_kv_type(const std::string& name) {
  const std::vector<std::string>& n = kv_type_names();
  for (size_t i = 0; i < n.size(); ++i)
    if (n[i] == name) return static_cast<KvType>(i);
  std::string known;
  for (const std::string& s : n) known += (known.empty() ? "" : ", ") + s;
  fail("unknown KV cache type '" + name + "' (known: " + known + ")");
}

DType kv_dtype(KvType t) {
  switch (t) {
    case KvType::F32: return DType::F32;
    case KvType::F16: return DType::F16;
    case KvType::BF16: return DType::BF16;
    case KvType::Q8_0: return DType::Q8_0;
    case KvType::Q4_0: return DType::Q4_0;
    case KvType::KIVI2:
    case KvType::KIVI4: break;
  }
  fail(std::string("internal: KV cache type ") + kv_type_name(t) + " has no row type");
}

void check_kv_type(KvType t, int head_dim, const char* what) {
  const int64_t block = kv_is_kivi(t) ? 32 : dtype_info(kv_dtype(t)).block_elems;
  if (head_dim < 1 || head_dim % block != 0)
    fail(std::string(what) + " " + kv_type_name(t) + " stores blocks of " + std::to_string(block) +
         " values; this model's head dimension is " + std::to_string(head_dim));
}

void check_kv_type_on_cuda(KvType t) {
  if (t == KvType::F32 || t == KvType::F16 || t == KvType::BF16 || t == KvType::Q8_0) return;
  fail(std::string("the cuda backend stores its KV cache as f32, f16, bf16 or q8_0; cache type ") + kv_type_name(t) +
       " is cpu only");
}

size_t kv_row_bytes(KvType t, int head_dim) {
  return kv_is_kivi(t) ? static_cast<size_t>(head_dim) * sizeof(uint16_t) : row_bytes(kv_dtype(t), head_dim);
}

void kv_store_row(KvType t, const float* x, uint8_t* dst, int d) {
  switch (t) {
    case KvType::F32: std::memcpy(dst, x, static_cast<size_t>(d) * sizeof(float)); return;
    case KvType::F16:
      for (int i = 0; i < d; ++i) {
        const uint16_t h = fp32_to_fp16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::BF16:
      for (int i = 0; i < d; ++i) {
        const uint16_t h = fp32_to_bf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::Q8_0: store_q8_0(x, dst, d); return;
    case KvType::Q4_0: store_q4_0(x, dst, d); return;
    case KvType::KIVI2:
    case KvType::KIVI4: break;
  }
  fail(std::string("internal: ") + kv_type_name(t) + " rows are stored by KiviRows");
}

void kv_load_rows(KvType t, const uint8_t* src, float* dst, int rows, int d) {
  // Rows are whole blocks and lie back to back: one call reads them all.
  dequantize_row(kv_dtype(t), src, dst, static_cast<int64_t>(rows) * d);
}

}  // namespace slake
