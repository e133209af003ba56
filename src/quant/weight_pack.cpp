#include "slake/quant/weight_pack.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "slake/error.h"
#include "slake/quant/quant_blocks.h"
#include "slake/quant/quant_dot.h"

namespace slake {

namespace {

size_t quant_bytes(DType t) { return t == DType::Q4_0 ? 16 : 32; }  // a block's quants, after its fp16 scale

bool shape_fits(const TensorView& w) {
  if (w.layout != WeightLayout::Rows || (w.type != DType::Q8_0 && w.type != DType::Q4_0)) return false;
  return w.ne.size() == 2 && w.n_rows() % kGroupRows == 0 && w.row_len() % (32 * x4_run_blocks(w.type)) == 0;
}

// Where block b of row i of a group lies in a run: its scale and its quants.
struct RunPlace {
  size_t scale, quants;
};
RunPlace place(DType t, int i, int b) {
  const int R = x4_run_blocks(t), slot = i * R + b;
  return {static_cast<size_t>(2 * slot), static_cast<size_t>(2 * kGroupRows * R) + static_cast<size_t>(slot) * quant_bytes(t)};
}

bool repack_enabled() {
  static const bool enabled = [] {
    const char* off = std::getenv("SLAKE_NO_REPACK");
    return !(off && *off && std::strcmp(off, "0") != 0);
  }();
  return enabled;
}

// X8: per block, the 8 rows' fp16 scales (16 bytes), then the 8 rows' 16 quant bytes as 4
// vectors of 32: vector k holds bytes 4k..4k+3 of row i at 4i.
constexpr size_t kX8BlockBytes = 8 * 18;
bool x8_shape_fits(const TensorView& w) {
  return w.layout == WeightLayout::Rows && w.type == DType::Q4_0 && w.ne.size() == 2 && w.n_rows() % kGroupRowsX8 == 0;
}
size_t x8_scale_at(int64_t b, int i) { return static_cast<size_t>(b) * kX8BlockBytes + static_cast<size_t>(2 * i); }
size_t x8_quants_at(int64_t b, int i, int k) {
  return static_cast<size_t>(b) * kX8BlockBytes + 16 + static_cast<size_t>(32 * k + 4 * i);
}

// X16 (quant_dot.h). A field of `count` entries of `bytes` each moves entry v of row i's block (at
// file + bytes v) to packed + 16 bytes v + bytes i of the group's block: the quant words (4 bytes),
// the per-group scale bytes (1), the fp16 scalars (2, one entry). The 6-bit scales of Q3_K, Q4_K
// and Q5_K are re-encoded (x16_scales).
struct X16Field {
  size_t packed, file;
  int count, bytes;
};
struct X16Fields {
  X16Field f[4];
  int n;
};
X16Fields x16_fields(DType t) {
  namespace q = quant;
  switch (t) {
    case DType::Q2_K: return {{{0, q::kQ2K_D, 1, 2}, {32, q::kQ2K_DMIN, 1, 2}, {64, q::kQ2K_SCALES, 16, 1}, {320, q::kQ2K_QS, 16, 4}}, 4};
    case DType::Q3_K: return {{{0, q::kQ3K_D, 1, 2}, {224, q::kQ3K_HMASK, 8, 4}, {736, q::kQ3K_QS, 16, 4}, {}}, 3};
    case DType::Q4_K: return {{{0, q::kQ4K_D, 1, 2}, {32, q::kQ4K_DMIN, 1, 2}, {256, q::kQ4K_QS, 32, 4}, {}}, 3};
    case DType::Q5_K: return {{{0, q::kQ5K_D, 1, 2}, {32, q::kQ5K_DMIN, 1, 2}, {256, q::kQ5K_QS, 32, 4}, {2304, q::kQ5K_QH, 8, 4}}, 4};
    case DType::Q6_K: return {{{0, q::kQ6K_D, 1, 2}, {32, q::kQ6K_SCALES, 16, 1}, {288, q::kQ6K_QL, 32, 4}, {2336, q::kQ6K_QH, 16, 4}}, 4};
    case DType::Q4_0: return {{{0, 0, 1, 2}, {32, 2, 4, 4}, {}, {}}, 2};
    case DType::Q8_0: return {{{0, 0, 1, 2}, {32, 2, 8, 4}, {}, {}}, 2};
    case DType::IQ4_NL: return {{{0, 0, 1, 2}, {32, q::kIQ4NL_QS, 4, 4}, {}, {}}, 2};
    case DType::Q5_0: return {{{0, 0, 1, 2}, {32, q::kQ5_0_QH, 1, 4}, {96, q::kQ5_0_QS, 4, 4}, {}}, 3};
    case DType::Q4_1: return {{{0, 0, 1, 2}, {32, 2, 1, 2}, {64, q::kQ4_1_QS, 4, 4}, {}}, 3};
    case DType::Q5_1: return {{{0, 0, 1, 2}, {32, 2, 1, 2}, {64, q::kQ5_1_QH, 1, 4}, {128, q::kQ5_1_QS, 4, 4}}, 4};
    default: return {{{0, q::kIQ4XS_D, 1, 2}, {32, q::kIQ4XS_SCALES_H, 1, 2}, {64, q::kIQ4XS_SCALES_L, 1, 4}, {128, q::kIQ4XS_QS, 32, 4}}, 4};
  }
}

// The 6-bit scales (and mins) of row i's block `file` to (kPack) or from the group's block `gb`.
// Q4_K/Q5_K: per sub-block r < 8, the byte sc(r) | (m(r) >> 4) << 6 at 64; per pair p < 4, the
// byte (m(2p) & 15) | (m(2p+1) & 15) << 4 at 192. Q3_K: scale + 32 (0..63) of group g < 16, its
// low 4 bits per pair p < 8 at 32 (g = 2p low nibble), its high 2 bits per quad p < 4 at 160
// (g = 4p + c at bits 2c).
// Packing reads the file's block and writes the group's; unpacking the other way round.
template <bool kPack>
using FileBlock = std::conditional_t<kPack, const uint8_t*, uint8_t*>;
template <bool kPack>
using GroupBlock = std::conditional_t<kPack, uint8_t*, const uint8_t*>;

template <bool kPack>
void x16_scales(DType t, GroupBlock<kPack> gb, int i, FileBlock<kPack> file) {
  if (t == DType::Q3_K) {
    if constexpr (kPack) {
      for (int p = 0; p < 8; ++p) gb[32 + 16 * p + i] = 0;
      for (int p = 0; p < 4; ++p) gb[160 + 16 * p + i] = 0;
      for (int g = 0; g < 16; ++g) {
        const int u = quant::q3k_scale(file, g) + 32;
        gb[32 + 16 * (g / 2) + i] = static_cast<uint8_t>(gb[32 + 16 * (g / 2) + i] | (u & 15) << (4 * (g % 2)));
        gb[160 + 16 * (g / 4) + i] = static_cast<uint8_t>(gb[160 + 16 * (g / 4) + i] | (u >> 4) << (2 * (g % 4)));
      }
    } else {
      uint8_t* s = file + quant::kQ3K_SCALES;
      std::memset(s, 0, 12);
      for (int g = 0; g < 16; ++g) {  // the inverse of q3k_scale
        const int low = (gb[32 + 16 * (g / 2) + i] >> (4 * (g % 2))) & 15, high = (gb[160 + 16 * (g / 4) + i] >> (2 * (g % 4))) & 3;
        s[g % 8] = static_cast<uint8_t>(s[g % 8] | low << (4 * (g / 8)));
        s[8 + g % 4] = static_cast<uint8_t>(s[8 + g % 4] | high << (2 * (g / 4)));
      }
    }
    return;
  }
  if (t != DType::Q4_K && t != DType::Q5_K) return;
  uint8_t sc[8], m[8];
  if constexpr (kPack) {
    for (int j = 0; j < 8; ++j) quant::q4k_scale_min(j, file + quant::kQ4K_SCALES, &sc[j], &m[j]);
    for (int r = 0; r < 8; ++r) gb[64 + 16 * r + i] = static_cast<uint8_t>(sc[r] | (m[r] >> 4) << 6);
    for (int p = 0; p < 4; ++p) gb[192 + 16 * p + i] = static_cast<uint8_t>((m[2 * p] & 15) | (m[2 * p + 1] & 15) << 4);
  } else {
    for (int r = 0; r < 8; ++r) {
      const uint8_t b = gb[64 + 16 * r + i], n = gb[192 + 16 * (r / 2) + i];
      sc[r] = b & 63;
      m[r] = static_cast<uint8_t>((b >> 6) << 4 | ((n >> (4 * (r % 2))) & 15));
    }
    uint8_t* s = file + quant::kQ4K_SCALES;
    for (int j = 0; j < 4; ++j) {  // the inverse of q4k_scale_min
      s[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
      s[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
      s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
  }
}

bool x16_shape_fits(const TensorView& w) {
  return w.layout == WeightLayout::Rows && x16_type(w.type) && w.ne.size() == 2 && w.n_rows() % kGroupRowsX16 == 0 &&
         w.row_len() % dtype_info(w.type).block_elems == 0;
}

// Row i's block `file` to or from the group's block `gb`: kPack copies file -> gb, else gb -> file.
template <bool kPack>
void transfer_x16(DType t, GroupBlock<kPack> gb, int i, FileBlock<kPack> file) {
  const X16Fields fields = x16_fields(t);
  for (int k = 0; k < fields.n; ++k) {
    const X16Field& f = fields.f[k];
    const size_t n = static_cast<size_t>(f.bytes);
    for (int v = 0; v < f.count; ++v) {
      const auto packed = gb + f.packed + 16 * n * static_cast<size_t>(v) + n * static_cast<size_t>(i);
      const auto in_file = file + f.file + n * static_cast<size_t>(v);
      if constexpr (kPack) std::memcpy(packed, in_file, n);
      else std::memcpy(in_file, packed, n);
    }
  }
  x16_scales<kPack>(t, gb, i, file);
}

}  // namespace

bool repack_x16_applies(const TensorView& w) {
  return x16_kernel_available(w.type) && repack_enabled() && x16_shape_fits(w);
}

TensorView pack_x16(const TensorView& w, uint8_t* dst) {
  if (!x16_shape_fits(w)) fail(w.name + ": cannot be repacked into groups of 16 rows");
  const int64_t nb = w.row_len() / dtype_info(w.type).block_elems;
  const size_t bb = static_cast<size_t>(dtype_info(w.type).block_bytes), rb = row_bytes(w.type, w.row_len());
  for (int64_t g = 0; g < w.n_rows() / kGroupRowsX16; ++g) {
    const size_t group = static_cast<size_t>(g) * kGroupRowsX16 * rb;
    for (int i = 0; i < kGroupRowsX16; ++i)
      for (int64_t b = 0; b < nb; ++b)
        transfer_x16<true>(w.type, dst + group + static_cast<size_t>(b) * kGroupRowsX16 * bb, i,
                           w.data + group + static_cast<size_t>(i) * rb + static_cast<size_t>(b) * bb);
  }
  TensorView v = w;
  v.data = dst;
  v.layout = WeightLayout::X16;
  return v;
}

void unpack_x16_row(const TensorView& packed, int64_t row, uint8_t* dst) {
  const int64_t nb = packed.row_len() / dtype_info(packed.type).block_elems;
  const size_t bb = static_cast<size_t>(dtype_info(packed.type).block_bytes), rb = row_bytes(packed.type, packed.row_len());
  const uint8_t* group = packed.data + static_cast<size_t>(row / kGroupRowsX16) * kGroupRowsX16 * rb;
  for (int64_t b = 0; b < nb; ++b)
    transfer_x16<false>(packed.type, group + static_cast<size_t>(b) * kGroupRowsX16 * bb, static_cast<int>(row % kGroupRowsX16),
                        dst + static_cast<size_t>(b) * bb);
}

bool repack_x4_applies(const TensorView& w) { return x4_kernel_available() && repack_enabled() && shape_fits(w); }

bool repack_x8_applies(const TensorView& w) {
  return x8_kernel_available() && repack_enabled() && x8_shape_fits(w);
}

TensorView pack_x8(const TensorView& w, uint8_t* dst) {
  if (!x8_shape_fits(w)) fail(w.name + ": cannot be repacked into groups of 8 rows");
  const int64_t nb = w.row_len() / 32;
  const size_t rb = row_bytes(w.type, w.row_len());
  for (int64_t g = 0; g < w.n_rows() / kGroupRowsX8; ++g) {
    const uint8_t* rows = w.data + static_cast<size_t>(g) * kGroupRowsX8 * rb;
    uint8_t* out = dst + static_cast<size_t>(g) * kGroupRowsX8 * rb;
    for (int i = 0; i < kGroupRowsX8; ++i)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = rows + i * rb + static_cast<size_t>(b) * 18;
        std::memcpy(out + x8_scale_at(b, i), blk, 2);
        for (int k = 0; k < 4; ++k) std::memcpy(out + x8_quants_at(b, i, k), blk + 2 + 4 * k, 4);
      }
  }
  TensorView v = w;
  v.data = dst;
  v.layout = WeightLayout::X8;
  return v;
}

void unpack_x8_row(const TensorView& packed, int64_t row, uint8_t* dst) {
  const int64_t nb = packed.row_len() / 32;
  const size_t rb = row_bytes(packed.type, packed.row_len());
  const uint8_t* in = packed.data + static_cast<size_t>(row / kGroupRowsX8) * kGroupRowsX8 * rb;
  const int i = static_cast<int>(row % kGroupRowsX8);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = dst + static_cast<size_t>(b) * 18;
    std::memcpy(blk, in + x8_scale_at(b, i), 2);
    for (int k = 0; k < 4; ++k) std::memcpy(blk + 2 + 4 * k, in + x8_quants_at(b, i, k), 4);
  }
}

TensorView pack_x4(const TensorView& w, uint8_t* dst) {
  if (!shape_fits(w)) fail(w.name + ": cannot be repacked into groups of 4 rows");
  const DType t = w.type;
  const int R = x4_run_blocks(t);
  const int64_t K = w.row_len(), nruns = K / (32 * R);
  const size_t rb = row_bytes(t, K), bb = rb / static_cast<size_t>(K / 32), qb = quant_bytes(t), runb = x4_run_bytes(t);
  for (int64_t g = 0; g < w.n_rows() / kGroupRows; ++g) {
    const uint8_t* rows = w.data + static_cast<size_t>(g) * kGroupRows * rb;
    uint8_t* out = dst + static_cast<size_t>(g) * kGroupRows * rb;
    for (int64_t r = 0; r < nruns; ++r, out += runb)
      for (int i = 0; i < kGroupRows; ++i)
        for (int b = 0; b < R; ++b) {
          const uint8_t* blk = rows + i * rb + static_cast<size_t>(r * R + b) * bb;
          const RunPlace at = place(t, i, b);
          std::memcpy(out + at.scale, blk, 2);
          std::memcpy(out + at.quants, blk + 2, qb);
        }
  }
  TensorView v = w;
  v.data = dst;
  v.layout = WeightLayout::X4;
  return v;
}

void unpack_x4_row(const TensorView& packed, int64_t row, uint8_t* dst) {
  const DType t = packed.type;
  const int R = x4_run_blocks(t);
  const int64_t K = packed.row_len(), nruns = K / (32 * R);
  const size_t rb = row_bytes(t, K), bb = rb / static_cast<size_t>(K / 32), qb = quant_bytes(t), runb = x4_run_bytes(t);
  const uint8_t* in = packed.data + static_cast<size_t>(row / kGroupRows) * kGroupRows * rb;
  const int i = static_cast<int>(row % kGroupRows);
  for (int64_t r = 0; r < nruns; ++r, in += runb)
    for (int b = 0; b < R; ++b) {
      uint8_t* blk = dst + static_cast<size_t>(r * R + b) * bb;
      const RunPlace at = place(t, i, b);
      std::memcpy(blk, in + at.scale, 2);
      std::memcpy(blk + 2, in + at.quants, qb);
    }
}

void unpack_row(const TensorView& packed, int64_t r, uint8_t* dst) {
  switch (packed.layout) {
    case WeightLayout::X4: return unpack_x4_row(packed, r, dst);
    case WeightLayout::X8: return unpack_x8_row(packed, r, dst);
    case WeightLayout::X16: return unpack_x16_row(packed, r, dst);
    case WeightLayout::Rows: std::memcpy(dst, packed.row(r), row_bytes(packed.type, packed.row_len())); return;
  }
}

const uint8_t* row_in_file_layout(const TensorView& t, int64_t r, std::vector<uint8_t>& scratch) {
  if (t.layout == WeightLayout::Rows) return t.row(r);
  scratch.resize(row_bytes(t.type, t.row_len()));
  unpack_row(t, r, scratch.data());
  return scratch.data();
}

// X4 before X8 (the types of X16 are apart).
bool repack_applies(const TensorView& w) { return repack_x4_applies(w) || repack_x8_applies(w) || repack_x16_applies(w); }
TensorView pack_for_cpu(const TensorView& w, uint8_t* dst) {
  if (repack_x16_applies(w)) return pack_x16(w, dst);
  return repack_x4_applies(w) ? pack_x4(w, dst) : pack_x8(w, dst);
}

bool repack_in_place(TensorView& w) {
  if (!repack_applies(w)) return false;
  std::vector<uint8_t> copy(w.data, w.data + w.nbytes);
  TensorView src = w;
  src.data = copy.data();
  w = pack_for_cpu(src, const_cast<uint8_t*>(w.data));
  return true;
}

}  // namespace slake
