// GGUF reader (versions 2 and 3): metadata of every value type (nested arrays included),
// tensor infos, and zero-copy tensor views into the mapped file. Every size and offset read
// from the file is checked before use; any inconsistency throws slake::Error naming the file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "slake/format/mapped_file.h"
#include "slake/quant/tensor.h"

namespace slake {

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufValue {
  GgufType type = GgufType::UINT8;
  // Scalars: integers in i (signed types) or u (unsigned, bool), floats in f.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string str;
  GgufType elem_type = GgufType::UINT8;  // arrays only
  std::vector<GgufValue> arr;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }
};

class GgufFile {
 public:
  // Maps and parses a file.
  static GgufFile open(const std::string& path);
  // Parses a buffer; `name` is used in error messages.
  static GgufFile parse(std::shared_ptr<const ByteBuffer> buf, const std::string& name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Typed getters: throw slake::Error("<file>: key <k> ...") when missing or of the wrong type.
  uint64_t get_uint(const std::string& key) const;
  uint64_t get_uint(const std::string& key, uint64_t fallback) const;
  double get_float(const std::string& key) const;  // accepts integers too
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  const GgufValue& get_array(const std::string& key, GgufType elem_type) const;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(const std::string& name) const;

  // Keeps the mapped bytes alive for as long as views are in use.
  std::shared_ptr<const ByteBuffer> buffer() const { return buf_; }

 private:
  std::string name_;
  std::shared_ptr<const ByteBuffer> buf_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace slake
