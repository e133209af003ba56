// The layouts of the CPU path's copy of a model's matrices (cpu/cpu_weights.h): the K-quants and
// IQ4_XS in transposed groups of 16 rows (X16: AVX-512 VNNI and AVX2 builds), and on AVX-512 VNNI
// the 32-element types Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0 too; Q8_0/Q4_0 matrices whose rows
// do not come in 16s in interleaved groups of 4 rows (X4, AVX-512 VNNI builds); Q4_0 in groups of
// 8 (X8, AVX2 builds without VNNI). quant_dot.h describes the layouts. The decode kernel then streams one contiguous run of bytes
// per register tile and loads the rows' scales with one instruction, instead of gathering 18- or
// 34-byte blocks from 4 or 8 rows. The quantised values and scales are unchanged, so the arithmetic
// is the same as on the file's rows. Every other tensor is the model's own view.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "slake/quant/tensor.h"

namespace slake {

// Whether the CPU path repacks this matrix: Q8_0/Q4_0, rows a multiple of 4, whole runs of blocks
// per row (quant_dot.h), and a kernel for the layout on this build (x4_kernel_available; the AMX
// prompt kernel unpacks the rows it reads). SLAKE_NO_REPACK=1 turns repacking off.
bool repack_x4_applies(const TensorView& w);

// Writes the interleaved groups of `w` (which must satisfy the shape rules above) to dst,
// w.nbytes bytes; returns the view of the copy (layout X4).
TensorView pack_x4(const TensorView& w, uint8_t* dst);
// Row r of an X4 view, in the file's block layout (row_bytes(type, K) bytes at dst).
void unpack_x4_row(const TensorView& packed, int64_t r, uint8_t* dst);

// Whether the CPU path repacks this matrix into groups of 8: Q4_0, rows a multiple of 8, and the
// group kernel built here (x8_kernel_available). SLAKE_NO_REPACK=1 turns it off too.
bool repack_x8_applies(const TensorView& w);
// As pack_x4 and unpack_x4_row, for the X8 layout.
TensorView pack_x8(const TensorView& w, uint8_t* dst);
void unpack_x8_row(const TensorView& packed, int64_t r, uint8_t* dst);

// Whether the CPU path repacks this matrix into groups of 16 rows (X16, quant_dot.h): Q2_K..Q6_K,
// IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or Q8_0, rows a multiple of 16, and a group kernel for the
// type built here (x16_kernel_available: all of them with AVX-512 VNNI, the K-quants and IQ4_XS
// with AVX2). Where X16 and X4 both apply (Q4_0, Q8_0), pack_for_cpu takes X16; AMX's prompts unpack either
// (ops.cpp). SLAKE_NO_REPACK=1 turns it off too.
bool repack_x16_applies(const TensorView& w);
// As pack_x4 and unpack_x4_row, for the X16 layout.
TensorView pack_x16(const TensorView& w, uint8_t* dst);
void unpack_x16_row(const TensorView& packed, int64_t r, uint8_t* dst);

// Row r of any view in the file's block layout, written to dst (row_bytes(type, K) bytes): the
// unpacking of its layout, or a copy of the row.
void unpack_row(const TensorView& packed, int64_t r, uint8_t* dst);
// Row r of any view in the file's block layout: the row itself, or its copy in `scratch`.
const uint8_t* row_in_file_layout(const TensorView& t, int64_t r, std::vector<uint8_t>& scratch);
// Repacks w's own bytes (writable memory) into the layout the CPU path uses here, if
// any applies; returns whether it did.
bool repack_in_place(TensorView& w);

// Whether the CPU path repacks w on this build (X4, X8 or X16), and the copy in that layout written to
// dst (w.nbytes bytes).
bool repack_applies(const TensorView& w);
TensorView pack_for_cpu(const TensorView& w, uint8_t* dst);

}  // namespace slake
