// Writers for GGUF and safetensors files: used by the llama2.c converter and by tests that need
// well-formed (or deliberately broken) files.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "slake/format/gguf.h"

namespace slake {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32) : version_(version), alignment_(alignment) {}

  void set(const std::string& key, GgufValue v) { kv_.emplace_back(key, std::move(v)); }
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_str(const std::string& key, const std::string& v);
  void set_str_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // ne in ggml order (ne[0] innermost); bytes must be the tensor's exact encoding.
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes);
  void add_f32_tensor(const std::string& name, std::vector<int64_t> ne, const float* data);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  uint32_t version_, alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "F16", "BF16"
  std::vector<int64_t> shape;  // row-major (outermost first), as safetensors stores it
  std::vector<uint8_t> bytes;
};
std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsEntry>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
void write_file(const std::string& path, const std::string& text);

}  // namespace slake
