// libFuzzer target: GGUF parsing, then model building and a read of every tensor's bytes.
// Any input must either parse or throw slake::Error; ASan/UBSan catch everything else.
#include <cstdint>
#include <vector>

#include "slake/error.h"
#include "slake/gguf.h"
#include "slake/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = std::make_shared<slake::GgufFile>(
        slake::GgufFile::parse(slake::buffer_from_bytes(std::vector<uint8_t>(data, data + size)), "fuzz.gguf"));
    std::vector<float> row;
    for (const slake::TensorView& t : g->tensors()) {
      row.resize(static_cast<size_t>(std::min<int64_t>(t.row_len(), 1 << 16)));
      if (t.row_len() <= (1 << 16)) slake::dequantize_row(t.type, t.row(t.n_rows() - 1), row.data(), t.row_len());
    }
    slake::model_from_gguf(g);
  } catch (const slake::Error&) {
  }
  return 0;
}
