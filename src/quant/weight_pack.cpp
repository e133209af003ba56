#include "slake/quant/weight_pack.h"

#include <cstdlib>
#include <cstring>

#include "slake/error.h"
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

}  // namespace

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

const uint8_t* row_in_file_layout(const TensorView& t, int64_t r, std::vector<uint8_t>& scratch) {
  if (t.layout == WeightLayout::Rows) return t.row(r);
  scratch.resize(row_bytes(t.type, t.row_len()));
  if (t.layout == WeightLayout::X8) unpack_x8_row(t, r, scratch.data());
  else unpack_x4_row(t, r, scratch.data());
  return scratch.data();
}

// X4 before X8.
bool repack_applies(const TensorView& w) { return repack_x4_applies(w) || repack_x8_applies(w); }
TensorView pack_for_cpu(const TensorView& w, uint8_t* dst) {
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
