// safetensors reader: the 8-byte header length, the JSON header, zero-copy tensor views into the
// mapped file. Dtypes F32, F16 and BF16 are accepted; any inconsistency throws slake::Error.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "slake/format/mapped_file.h"
#include "slake/quant/tensor.h"

namespace slake {

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  static SafetensorsFile parse(std::shared_ptr<const ByteBuffer> buf, const std::string& name);

  const std::string& name() const { return name_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string name_;
  std::shared_ptr<const ByteBuffer> buf_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint directory's tensors: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json`. Each shard is mapped once; lookups go through the weight map.
class SafetensorsSet {
 public:
  static SafetensorsSet open_dir(const std::string& dir);
  const TensorView* find_tensor(const std::string& name) const;
  std::vector<std::string> tensor_names() const;

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace slake
