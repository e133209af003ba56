// A typed, read-only view of a tensor's bytes inside a mapped model file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "slake/quant/dtype.h"

namespace slake {

// How a matrix's rows lie in memory: as the file stores them, or repacked by the CPU path into
// interleaved groups of 4 rows (X4), 8 rows (X8) or 16 rows (X16: the K-quants, and the 32-element
// types and Q8_0 with AVX-512 VNNI) (weight_pack.h; row() does not apply).
enum class WeightLayout : uint8_t { Rows, X4, X8, X16 };

struct TensorView {
  std::string name;
  DType type = DType::F32;
  // ggml order: ne[0] is the innermost (contiguous) dimension. A weight matrix W[out][in] has
  // ne = {in, out}: each of its `out` rows is `in` contiguous elements.
  std::vector<int64_t> ne;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  WeightLayout layout = WeightLayout::Rows;

  int64_t n_elements() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
  }
  int64_t row_len() const { return ne.empty() ? 1 : ne[0]; }
  int64_t n_rows() const { return row_len() == 0 ? 0 : n_elements() / row_len(); }
  // Row r, for the Rows layout (weight_pack.h's row_in_file_layout reads any layout).
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(type, row_len()); }
};

std::string shape_string(const std::vector<int64_t>& ne);

}  // namespace slake
