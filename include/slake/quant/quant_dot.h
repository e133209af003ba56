// Dot products of weight rows of any supported type with activation rows, without dequantising the
// weights. As in llama.cpp, the activations of a product with quantised weights are first quantised
// per block (Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL weights, Q8_1 for Q4_1/Q5_1 and for the 32-element
// types in the X16 layout, Q8_K for the K-quants and IQ4_XS), so the inner loop is an integer dot
// product; float weights (F32/F16/BF16) take fp32 activations.
//
// Two implementations share this interface: the portable one (plain C++, any machine) and the
// SIMD one (AVX2 / AVX-512 VNNI, chosen at build time from the compiler's target). The SIMD one is
// what the engine calls when it was compiled in; the portable one is the reference the tests check
// it against.
#pragma once
#include <cstddef>
#include <cstdint>

#include "slake/quant/dtype.h"
#include "slake/quant/tensor.h"

namespace slake {

enum class ActFormat { F32, Q8_0, Q8_1, Q8_K };

// Layouts of the quantised activation blocks (ggml's block_q8_0 and block_q8_K).
struct ActBlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[32];
};
// Q8_1: the quants and d of Q8_0 (d rounded to fp16 as there), and s = d * sum(qs), the term that
// a weight block's min meets. ggml keeps d and s in fp16; here they are fp32, so that s is the
// exact sum of the values the quants stand for to fp32 rounding.
struct ActBlockQ8_1 {
  float d;
  float s;
  int8_t qs[32];
};
struct ActBlockQ8_K {
  float d;
  int8_t qs[256];  // -127..127: the IQ4 kernels' sign trick needs -128 absent
  int16_t bsums[16];  // sums of each 16 quants
};
static_assert(sizeof(ActBlockQ8_0) == 34, "block_q8_0 layout");
static_assert(sizeof(ActBlockQ8_1) == 40, "Q8_1 activation layout");
static_assert(sizeof(ActBlockQ8_K) == 292, "block_q8_K layout");

ActFormat act_format(DType weight);
// The activations a matrix of this type in this layout meets: act_format(weight), but Q8_1 for the
// 32-element types in the X16 layout (the block sums meet their offsets there).
ActFormat act_format(DType weight, WeightLayout layout);
// Bytes of one prepared activation row of n elements (n a multiple of the weight's block size).
size_t act_row_bytes(ActFormat f, int64_t n);
// Prepares one activation row: a copy for F32, per-block quantisation otherwise (ggml's rounding).
void quantize_act_row(ActFormat f, const float* x, void* dst, int64_t n);
// The prepared row back in fp32 (for tests and error bounds).
void dequantize_act_row(ActFormat f, const void* src, float* dst, int64_t n);

// Most rows and tokens one dot_tile call takes.
constexpr int kTileRows = 4, kTileTokens = 4;
constexpr int kWideTileRows = 8;

// Most rows one dot_tile call takes for weights of type t: kWideTileRows for Q4_0 on AVX2
// without VNNI (a row per lane of one accumulator), kTileRows otherwise. Callers sweep rows in
// steps of this.
int tile_rows_max(DType t);

// out[j * out_stride + i] = (weight row i) . (activation row j) for i < rm, j < rn, where weight
// row i starts at w + i * w_stride and activation row j at act + j * act_stride; each is K long.
// rm <= tile_rows_max(t), rn <= kTileTokens. (portable::dot_tile takes any rm.) `prompt`: the
// product has more tokens than ops.h's kMatmulExactRows, so a kernel that rounds differently from
// the one-token product may serve it (the K-quants' AVX-512 rows).
void dot_tile(DType t, int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride,
              int rn, float* out, int64_t out_stride, bool prompt = false);

// out[j * out_stride + i] = (q8_0 row i) . (q8_0 activation row j) for i < rm <= kRows16 and any
// number rn of activation rows: short rows, many of them, as the recall store's keys and page
// summaries are (kv_recall.h). The rows' sums come out a lane per row (no horizontal sum per row and
// activation row, which is most of dot_tile's work when K is 64). Rows as dot_tile's.
constexpr int kRows16 = 16;
void dot_rows16_q8_0(int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride, int rn,
                     float* out, int64_t out_stride);

// n_tiles tiles of 16 vectors of r int8 values each (r % 4 == 0), tile t at tiles + t tile_stride:
// the vectors' fp16 scales (32 bytes), then the values held unsigned (value + 128) 4 per lane at a
// time: byte 4j + i of the 64-byte group m at 32 + 64 m is value 4m + i of vector j. For the rn
// int8 rows q_k (at q + k q_stride, r values each, scale q_scale[k], sum q_sum[k]):
// out[k out_stride + t] = the largest over the tile's vectors j (j < valid_last in the last tile) of
// scale_j q_scale[k] sum_i (u_j[i] - 128) q_k[i], the integer sums exact. The recall store's
// low-rank key coordinates against a query's, a lane per key and a tile per 16 keys (kv_recall.h).
void max_dot_lanes16_u8(int r, const uint8_t* tiles, size_t tile_stride, int n_tiles, int valid_last, const int8_t* q,
                        size_t q_stride, const float* q_scale, const int32_t* q_sum, int rn, float* out, size_t out_stride);

// Q8_0/Q4_0 matrices repacked for the CPU (weight_pack.h) come in groups of kGroupRows rows whose
// blocks are interleaved in runs of x4_run_blocks blocks (2 for Q8_0, 4 for Q4_0): per run, the
// 4 x R fp16 scales (row 0's R blocks, then row 1's, ...), then the quants of the same 4 x R blocks
// in the same order. A row's quants in a run are one 64- or 128-byte stretch: one 512-bit load
// (Q8_0 pair, Q4_0 quad of 128 nibbles) or two. A group holds the same bytes as its rows, so
// group g starts where row 4g would.
constexpr int kGroupRows = kTileRows;
constexpr int x4_run_blocks(DType t) { return t == DType::Q4_0 ? 4 : 2; }
// Bytes of one run of a group.
constexpr size_t x4_run_bytes(DType t) {
  return static_cast<size_t>(kGroupRows * x4_run_blocks(t)) * (t == DType::Q4_0 ? 18 : 34);
}

// out[j * out_stride + i] = (row i of the group at `group`) . (activation row j), for the group's
// 4 rows and j < rn <= kTileTokens. K is a multiple of 32 * x4_run_blocks(t).
void dot_tile_x4(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride);

// Whether dot_tile runs SIMD code, and which ("avx512-vnni", "avx2", "portable").
const char* dot_kernel_isa();

// Whether dot_tile_x4 has a kernel of its own here (AVX-512 VNNI); elsewhere it gathers the rows
// back and runs dot_tile, so repacking would only cost time.
bool x4_kernel_available();

// Q4_0 matrices repacked for AVX2 without VNNI come in groups of kGroupRowsX8 rows. Per block, the
// 8 rows' fp16 scales (16 bytes), then their 16 quant bytes as 4 vectors of 32 bytes: vector k
// holds bytes 4k..4k+3 of row i at byte 4i, so that each 32-bit lane of a register is one row.
// 144 bytes a block, as the 8 rows take in the file: group g starts where row 8g would.
constexpr int kGroupRowsX8 = kWideTileRows;

// out[j * out_stride + i] = (row i of the Q4_0 group at `group`) . (activation row j), for the
// group's 8 rows and j < rn <= kTileTokens.
void dot_tile_x8(int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride);

// Whether dot_tile_x8 has a kernel of its own here (AVX2 without VNNI).
bool x8_kernel_available();

// The K-quants and IQ4_XS, repacked for AVX-512 VNNI (and AVX2), come in groups of
// kGroupRowsX16 rows, transposed so that each 32-bit lane of a 512-bit register (or of two 256-bit
// ones) is one row: a block's dot product with a token is then 64 dpbusd over all 16 rows, with no
// unpacking per row and no horizontal sum. Per 256-element block b, the group holds its 16 rows' blocks in as many bytes (group g
// starts where row 16g would): the quants as they are in the file, word by word (4-byte word w
// of row i's qs, qh, ql or hmask at region + 64w + 4i), and the scalars transposed (fp16 d of
// row i at 2i; a per-group byte of row i at region + 16g + i):
//   Q2_K (16 x 84): d, dmin; at 64 the 16 scale|min bytes; at 320 the 16 words of qs.
//   Q3_K (16 x 110): d; at 32 per pair p < 8 of groups the low 4 bits of scale + 32 (group 2p low
//     nibble), at 160 per quad p < 4 their high 2 bits (group 4p + c at bit 2c); at 224 the 8
//     words of hmask; at 736 the 16 words of qs.
//   Q4_K (16 x 144): d, dmin at 32; per sub-block r < 8 at 64, the byte sc(r) | (m(r) >> 4) << 6;
//     per pair p < 4 at 192, the byte (m(2p) & 15) | (m(2p+1) & 15) << 4; at 256 the 32 words of qs.
//   Q5_K (16 x 176): Q4_K's, then at 2304 the 8 words of qh.
//   Q6_K (16 x 210): d; at 32 the 16 int8 scales; at 288 the 32 words of ql; at 2336 the 16 of qh.
//   IQ4_XS (16 x 136): d, scales_h (u16) at 32; at 64 the word of scales_l; at 128 the 32 words of qs.
// The 32-element types Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0 take the same form per 32-element
// block (AVX-512 VNNI builds only), against Q8_1 activations, whose sums meet the quants' offsets and mins:
//   Q4_0, IQ4_NL (16 x 18): d; at 32 the 4 words of qs.
//   Q8_0 (16 x 34): d; at 32 the 8 words of qs.
//   Q4_1 (16 x 20): d, m at 32; at 64 the 4 words of qs.
//   Q5_0 (16 x 22): d; at 32 the word of qh; at 96 the 4 words of qs.
//   Q5_1 (16 x 24): d, m at 32; at 64 the word of qh; at 128 the 4 words of qs.
constexpr int kGroupRowsX16 = 16;
constexpr bool x16_kquant_type(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K || t == DType::IQ4_XS;
}
constexpr bool x16_block32_type(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::IQ4_NL ||
         t == DType::Q8_0;
}
constexpr bool x16_type(DType t) { return x16_kquant_type(t) || x16_block32_type(t); }

// out[j * out_stride + i] = (row i of the X16 group at `group`) . (activation row j), for the
// group's 16 rows and j < rn <= kTileTokens.
void dot_tile_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                  int64_t out_stride);

// dot_tile_x16 for any number n of tokens (prompts): each block of the group is unpacked once
// for all of them. The arithmetic is the tile kernel's, so the results equal its bit for bit.
void dot_group_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int64_t n, float* out,
                   int64_t out_stride);

// Whether prompts go through dot_group_x16 rather than tiles of 4 tokens. With AVX-512 VNNI it
// pays where unpacking costs most: Q3_K, Q5_K, Q6_K (pp512 on the TinyLlama shape 1.13-1.24x
// faster than the tiles, Q4_K and IQ4_XS 10% slower), and the 32-element types, whose chunks of 8
// blocks unpack once for every token instead of once per 4. The AVX2 kernels unpack a block once per
// call whatever its tokens, so there every type with a kernel does.
bool x16_unpack_for_prompts(DType t);

// Whether dot_tile_x16 has a kernel of its own here for t: every X16 type with AVX-512 VNNI, the
// K-quants and IQ4_XS with AVX2 (dot_simd_x16_avx2.cpp).
bool x16_kernel_available(DType t);

namespace portable {
void dot_tile(DType t, int64_t K, const uint8_t* w, size_t w_stride, int rm, const uint8_t* act, size_t act_stride,
              int rn, float* out, int64_t out_stride);
// The group's rows gathered back (weight_pack.h's unpack), then dot_tile: the reference.
void dot_tile_x4(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride);
void dot_tile_x8(int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                 int64_t out_stride);
void dot_tile_x16(DType t, int64_t K, const uint8_t* group, const uint8_t* act, size_t act_stride, int rn, float* out,
                  int64_t out_stride);
}

}  // namespace slake
