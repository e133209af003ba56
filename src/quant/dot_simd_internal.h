// The SIMD kernels of the weight types that quant_dot_simd.cpp hands to other files: the
// 32-element block types with a min or a fifth bit or a value table (dot_simd_block32.cpp), and
// the K-quants (dot_simd_kquants.cpp), and the X16 layout's AVX2 kernel (dot_simd_x16_avx2.cpp).
// Built only with AVX2, but for x16_avx2_type and group_x16_avx2, which exist in every build.
#pragma once
#include <cstddef>
#include <cstdint>

#include "slake/quant/dtype.h"

namespace slake::simd {

// Whether t is one of the types below.
bool is_block32_type(DType t);  // Q4_1, Q5_0, Q5_1, IQ4_NL
bool is_kquant_type(DType t);  // Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS

// dot_tile (quant_dot.h) for a block32 type: rm <= kTileRows rows x rn <= kTileTokens tokens.
void tile_block32(DType t, int64_t K, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, int rn,
                  float* out, int64_t os);

// dot_tile for a K-quant type: rm <= kTileRows rows x rn <= kTileTokens Q8_K activation rows.
void tile_kquant(DType t, int64_t K, const uint8_t* w, size_t ws, int rm, const uint8_t* a, size_t as, int rn,
                 float* out, int64_t os, bool prompt = false);

// The X16 layout's 32-element types on AVX-512 VNNI builds (dot_simd_x16_block32.cpp):
// dot_tile_x16 and dot_group_x16 (quant_dot.h) for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0 against Q8_1
// activations.
void tile_x16_block32(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t as, int rn, float* out,
                      int64_t os);
void group_x16_block32(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t as, int64_t n, float* out,
                       int64_t os);

// The X16 layout on AVX2 builds without AVX-512 VNNI (dot_simd_x16_avx2.cpp): whether t has a
// kernel there, and dot_group_x16 (quant_dot.h) for such a type, any number n of tokens.
bool x16_avx2_type(DType t);
void group_x16_avx2(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t as, int64_t n, float* out, int64_t os);

}  // namespace slake::simd
