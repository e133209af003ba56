// The element types the exact KV cache stores keys and values in (llama.cpp's -ctk/-ctv): one row
// of head_dim values per token and KV head, quantised on append and read back a tile of rows at a
// time by the attention kernels, never as a full-size fp32 copy.
//   f32:  4 bytes a value
//   f16:  2 bytes (IEEE half, round to nearest even); the default, as in llama.cpp
//   bf16: 2 bytes (round to nearest even)
//   q8_0: blocks of 32: an f16 scale d = max|x| / 127 and 32 int8, x ~ d q (ggml's block_q8_0)
//   q4_0: blocks of 32: an f16 scale d = m / -8 (m the value of largest magnitude) and 32 nibbles,
//         x ~ d (q - 8) (ggml's block_q4_0)
//   kivi2, kivi4: KIVI at 2 or 4 bits (kv_kivi.h): keys per channel over groups of 32 tokens,
//         values per token, the newest tokens f16 until they fill a group. Not a row type: the
//         rows of a head are stored together (KvHead::kivi_k / kivi_v).
// The linear states (Taylor, centroids) stay fp32 whatever the type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "slake/quant/dtype.h"

namespace slake {

enum class KvType { F32, F16, BF16, Q8_0, Q4_0, KIVI2, KIVI4 };

// The names -ctk/-ctv take, in the order above.
const std::vector<std::string>& kv_type_names();
const char* kv_type_name(KvType t);
// Throws slake::Error naming the known types.
KvType parse_kv_type(const std::string& name);
// KIVI's types, whose rows are not stored one by one.
inline bool kv_is_kivi(KvType t) { return t == KvType::KIVI2 || t == KvType::KIVI4; }
inline int kv_kivi_bits(KvType t) { return t == KvType::KIVI2 ? 2 : 4; }
// The matching tensor type (dtype.h), whose row layout the cache uses (row types only).
DType kv_dtype(KvType t);
// Throws slake::Error when rows of head_dim values cannot be stored in `t` (blocks of 32).
void check_kv_type(KvType t, int head_dim, const char* what);
// The cuda backend stores f32, f16, bf16 and q8_0 rows (kernels/kernels.h); throws slake::Error
// for any other type, so that tools refuse it before a model is loaded.
void check_kv_type_on_cuda(KvType t);
// Bytes of one stored row of head_dim values; for KIVI, a bound: an f16 row (kv_kivi.h).
size_t kv_row_bytes(KvType t, int head_dim);

// Row types only: stores x[0..d) as one row of type t at dst (kv_row_bytes(t, d) bytes).
void kv_store_row(KvType t, const float* x, uint8_t* dst, int d);
// Reads `rows` consecutive stored rows back into fp32, d values each; exact for f32, f16, bf16
// (every stored value is an fp32 value) and the blocks' d * q for q8_0 and q4_0.
void kv_load_rows(KvType t, const uint8_t* src, float* dst, int rows, int d);

}  // namespace slake
