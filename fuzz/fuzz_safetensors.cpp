// libFuzzer target: safetensors parsing and a read of every tensor's last row.
#include <cstdint>
#include <vector>

#include "slake/error.h"
#include "slake/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    slake::SafetensorsFile f = slake::SafetensorsFile::parse(
        slake::buffer_from_bytes(std::vector<uint8_t>(data, data + size)), "fuzz.safetensors");
    std::vector<float> row;
    for (const slake::TensorView& t : f.tensors()) {
      if (t.n_elements() == 0 || t.row_len() > (1 << 16)) continue;
      row.resize(static_cast<size_t>(t.row_len()));
      slake::dequantize_row(t.type, t.row(t.n_rows() - 1), row.data(), t.row_len());
    }
  } catch (const slake::Error&) {
  }
  return 0;
}
