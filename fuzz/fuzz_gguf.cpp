// libFuzzer target: GGUF parsing, then model building and a read of every tensor's bytes: its
// last row dequantised and multiplied with an activation row by the dot-product kernel of its
// type (every type the engine supports, whatever bytes the blocks hold).
// Any input must either parse or throw slake::Error; ASan/UBSan catch everything else.
#include <cmath>
#include <cstdint>
#include <vector>

#include "slake/error.h"
#include "slake/format/gguf.h"
#include "slake/model/model.h"
#include "slake/quant/quant_dot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = std::make_shared<slake::GgufFile>(
        slake::GgufFile::parse(slake::buffer_from_bytes(std::vector<uint8_t>(data, data + size)), "fuzz.gguf"));
    std::vector<float> row;
    for (const slake::TensorView& t : g->tensors()) {
      row.resize(static_cast<size_t>(std::min<int64_t>(t.row_len(), 1 << 16)));
      if (t.row_len() > (1 << 16)) continue;
      slake::dequantize_row(t.type, t.row(t.n_rows() - 1), row.data(), t.row_len());
      bool finite = true;  // activations are quantised from finite values only
      for (int64_t k = 0; k < t.row_len(); ++k) finite = finite && std::isfinite(row[static_cast<size_t>(k)]);
      if (!finite) continue;
      const slake::ActFormat f = slake::act_format(t.type);
      std::vector<uint8_t> act(slake::act_row_bytes(f, t.row_len()));
      slake::quantize_act_row(f, row.data(), act.data(), t.row_len());  // the row against itself
      float out = 0;
      slake::dot_tile(t.type, t.row_len(), t.row(t.n_rows() - 1), 0, 1, act.data(), act.size(), 1, &out, 1);
    }
    slake::model_from_gguf(g);
  } catch (const slake::Error&) {
  }
  return 0;
}
