#include "slake/format/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "slake/error.h"

namespace slake {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "F16") *out = DType::F16;
  else if (s == "BF16") *out = DType::BF16;
  else return false;
  return true;
}

uint64_t json_uint(const nlohmann::json& j, const std::string& where) {
  if (!j.is_number_unsigned()) {
    if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
    fail(where + " is not a non-negative integer");
  }
  return j.get<uint64_t>();
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) { return parse(map_file(path), path); }

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<const ByteBuffer> buf, const std::string& name) {
  SafetensorsFile f;
  f.name_ = name;
  f.buf_ = std::move(buf);
  const uint8_t* base = f.buf_->data();
  const size_t size = f.buf_->size();
  if (size < 8) fail(name + ": truncated file: no safetensors header length");
  uint64_t header_len;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeaderBytes) fail(name + ": safetensors header length " + std::to_string(header_len) + " is absurd");
  if (header_len > size - 8)
    fail(name + ": truncated file: header of " + std::to_string(header_len) + " bytes runs past the end");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + data_start);
  } catch (const nlohmann::json::exception& e) {
    fail(name + ": malformed JSON in the safetensors header: " + e.what());
  }
  if (!header.is_object()) fail(name + ": the safetensors header is not a JSON object");

  struct Extent {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Extent> extents;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& tname = it.key();
    const nlohmann::json& e = it.value();
    if (tname == "__metadata__") {
      if (!e.is_object()) fail(name + ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m)
        if (m.value().is_string()) f.metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = name + ": tensor " + tname;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail(where + ": entry needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) fail(where + ": dtype is not a string");
    DType type;
    const std::string ds = e["dtype"].get<std::string>();
    if (!parse_dtype(ds, &type)) fail(where + ": dtype " + ds + " is not supported (F32, F16, BF16 are)");
    const nlohmann::json& shape = e["shape"];
    const nlohmann::json& offs = e["data_offsets"];
    if (!shape.is_array() || shape.size() > 8) fail(where + ": shape is not an array of at most 8 dimensions");
    if (!offs.is_array() || offs.size() != 2) fail(where + ": data_offsets is not a [begin, end] pair");
    std::vector<int64_t> ne;  // reversed: ggml order
    uint64_t n = 1;
    for (size_t k = 0; k < shape.size(); ++k) {
      const uint64_t d = json_uint(shape[k], where + ": shape entry");
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || (d != 0 && n > std::numeric_limits<uint64_t>::max() / 8 / d))
        fail(where + ": shape is too large");
      n *= d;
      ne.insert(ne.begin(), static_cast<int64_t>(d));
    }
    if (ne.empty()) ne.push_back(1);  // a scalar
    const uint64_t begin = json_uint(offs[0], where + ": data offset");
    const uint64_t end = json_uint(offs[1], where + ": data offset");
    if (end < begin) fail(where + ": data_offsets end before they begin");
    if (end > data_size)
      fail(where + ": data [" + std::to_string(begin) + ", " + std::to_string(end) + ") lies outside the " +
           std::to_string(data_size) + " data bytes of the file");
    const uint64_t nbytes = n * dtype_info(type).block_bytes;
    if (end - begin != nbytes)
      fail(where + ": shape " + shape_string(ne) + " of " + ds + " needs " + std::to_string(nbytes) +
           " bytes but data_offsets span " + std::to_string(end - begin));
    TensorView tv;
    tv.name = tname;
    tv.type = type;
    tv.ne = std::move(ne);
    tv.data = base + data_start + begin;
    tv.nbytes = static_cast<size_t>(nbytes);
    f.tensors_.push_back(std::move(tv));
    extents.push_back({begin, end, tname});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < extents.size(); ++k)
    if (extents[k].begin < extents[k - 1].end)
      fail(name + ": tensors " + extents[k - 1].name + " and " + extents[k].name + " overlap");
  for (size_t k = 0; k < f.tensors_.size(); ++k) f.index_[f.tensors_[k].name] = k;
  return f;
}

const TensorView* SafetensorsFile::find_tensor(const std::string& n) const {
  auto it = index_.find(n);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  SafetensorsSet set;
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (file_exists(index_path)) {
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(read_text_file(index_path));
    } catch (const nlohmann::json::exception& e) {
      fail(index_path + ": malformed JSON: " + e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail(index_path + ": no weight_map object");
    std::map<std::string, size_t> shard_of_file;
    std::vector<std::pair<std::string, std::string>> wanted;  // tensor -> shard file
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(index_path + ": weight_map entry " + it.key() + " is not a file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        fail(index_path + ": shard name '" + shard + "' is not a plain file name");
      wanted.emplace_back(it.key(), shard);
      if (!shard_of_file.count(shard)) shard_of_file[shard] = shard_of_file.size();
    }
    set.files_.resize(shard_of_file.size());
    for (const auto& [shard, k] : shard_of_file) set.files_[k] = SafetensorsFile::open(dir + "/" + shard);
    for (const auto& [tensor, shard] : wanted) {
      const TensorView* tv = set.files_[shard_of_file[shard]].find_tensor(tensor);
      if (!tv) fail(dir + "/" + shard + ": tensor " + tensor + " is listed in the index but not in the shard");
      set.index_[tensor] = tv;
    }
  } else if (file_exists(single)) {
    set.files_.push_back(SafetensorsFile::open(single));
    for (const TensorView& tv : set.files_[0].tensors()) set.index_[tv.name] = &tv;
  } else {
    fail(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  return set;
}

const TensorView* SafetensorsSet::find_tensor(const std::string& n) const {
  auto it = index_.find(n);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsSet::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

}  // namespace slake
