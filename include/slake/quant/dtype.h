// Tensor element types (ggml's numbering, so GGUF type ids map 1:1), fp16/bf16 conversion and
// row dequantisation to fp32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace slake {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
};

struct DTypeInfo {
  const char* name;
  int64_t block_elems;  // elements per block (1 for plain floats)
  int64_t block_bytes;  // bytes per block
};

// True when `id` is one of the types above (the ones this engine can compute with).
bool dtype_supported(uint32_t id);
// Name of any ggml type id, including the ones we do not support ("Q5_K", "type 99" if unknown).
std::string ggml_type_name(uint32_t id);
const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }

// Bytes of a row of `n` elements; `n` must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_elems * i.block_bytes);
}

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even
inline float bf16_to_fp32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);  // round to nearest even, NaN kept quiet

// Dequantises `n` elements (a multiple of the block size) starting at a block boundary.
// Bit-exact with the gguf reference dequantisation (same fp32 operation order).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace slake
