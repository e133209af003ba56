// Intel AMX path of matmul for Q8_0/Q4_0 weights at prompt sizes (see matmul_amx.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace slake {

// Whether this build has the AMX kernel and the OS granted the tile state. The environment
// variable SLAKE_NO_AMX=1 turns it off (to compare with the VNNI kernels).
bool amx_available();

// out[t * os + r] = weight row r . activation row t for r < rows (whole groups of 16 only; the
// caller handles the rest), t < n_tokens. The Q8_0 activation rows must exist up to n_tokens
// rounded up to 16 (padding rows are read and their results dropped); act_scales[t * K/32 + b]
// is the fp32 scale of activation block b of token t, for the padded rows too.
void amx_rows_q8(bool q4, int64_t K, const uint8_t* w, size_t ws, int64_t rows, const uint8_t* act, size_t as,
                 const float* act_scales, int64_t n_tokens, float* out, int64_t os);

}  // namespace slake
