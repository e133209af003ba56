// Prompt-sized products of float weights (F32/F16/BF16) with fp32 activations, as outer products
// over a k-major panel (see matmul_panel.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "slake/quant/dtype.h"

namespace slake {

// Whether this build has the panel kernel (AVX-512, or AVX2 with FMA and F16C).
bool panel_available();

// Rows of one panel: matmul hands out chunks of this many rows.
constexpr int kPanelRows = 32;

// Activations in the panel kernel's order: tiles of 12 tokens, then of 4, then single tokens, each
// k-major, so a tile's broadcasts come from one stream. The tile that starts at token j, of width
// w, is packed[j * K + k * w + i] = act[(j + i) * K + k]. Packs the tile that starts at token j,
// if one does (does nothing otherwise), so the tokens can be handed out in any split.
void pack_panel_tile(const float* act, int64_t K, int64_t n_tokens, int64_t j, float* packed);

// out[t * os + r] = weight row r . activation row t for r < rows <= kPanelRows, t < n_tokens.
// Row r of the weights starts at w + r * ws and has K elements of type t; `packed` holds the
// activations as pack_panel_tile wrote them. `panel` is 64-byte aligned scratch of
// kPanelRows * kPanelK floats.
constexpr int64_t kPanelK = 2048;
void panel_rows(DType t, int64_t K, const uint8_t* w, size_t ws, int rows, const float* packed, int64_t n_tokens,
                float* out, int64_t os, float* panel);

}  // namespace slake
