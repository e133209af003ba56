#include "slake/format/writers.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "slake/error.h"

namespace slake {

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t n = out.size();
  out.resize(n + sizeof(T));
  std::memcpy(out.data() + n, &v, sizeof(T));
}

void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_value(std::vector<uint8_t>& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8: put<uint8_t>(out, static_cast<uint8_t>(v.u)); break;
    case GgufType::INT8: put<int8_t>(out, static_cast<int8_t>(v.i)); break;
    case GgufType::UINT16: put<uint16_t>(out, static_cast<uint16_t>(v.u)); break;
    case GgufType::INT16: put<int16_t>(out, static_cast<int16_t>(v.i)); break;
    case GgufType::UINT32: put<uint32_t>(out, static_cast<uint32_t>(v.u)); break;
    case GgufType::INT32: put<int32_t>(out, static_cast<int32_t>(v.i)); break;
    case GgufType::UINT64: put<uint64_t>(out, v.u); break;
    case GgufType::INT64: put<int64_t>(out, v.i); break;
    case GgufType::FLOAT32: put<float>(out, static_cast<float>(v.f)); break;
    case GgufType::FLOAT64: put<double>(out, v.f); break;
    case GgufType::BOOL: put<uint8_t>(out, v.u ? 1 : 0); break;
    case GgufType::STRING: put_str(out, v.str); break;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.arr.size());
      for (const GgufValue& e : v.arr) put_value(out, e);
      break;
  }
}

GgufValue scalar(GgufType t) {
  GgufValue v;
  v.type = t;
  return v;
}

GgufValue array_of(GgufType et) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = et;
  return v;
}

}  // namespace

void GgufWriter::set_u32(const std::string& key, uint32_t x) { GgufValue v = scalar(GgufType::UINT32); v.u = x; set(key, v); }
void GgufWriter::set_i32(const std::string& key, int32_t x) { GgufValue v = scalar(GgufType::INT32); v.i = x; set(key, v); }
void GgufWriter::set_f32(const std::string& key, float x) { GgufValue v = scalar(GgufType::FLOAT32); v.f = x; set(key, v); }
void GgufWriter::set_bool(const std::string& key, bool x) { GgufValue v = scalar(GgufType::BOOL); v.u = x; set(key, v); }
void GgufWriter::set_str(const std::string& key, const std::string& x) { GgufValue v = scalar(GgufType::STRING); v.str = x; set(key, v); }

void GgufWriter::set_str_array(const std::string& key, const std::vector<std::string>& xs) {
  GgufValue v = array_of(GgufType::STRING);
  for (const auto& x : xs) { GgufValue e = scalar(GgufType::STRING); e.str = x; v.arr.push_back(std::move(e)); }
  set(key, std::move(v));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& xs) {
  GgufValue v = array_of(GgufType::FLOAT32);
  for (float x : xs) { GgufValue e = scalar(GgufType::FLOAT32); e.f = x; v.arr.push_back(e); }
  set(key, std::move(v));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& xs) {
  GgufValue v = array_of(GgufType::INT32);
  for (int32_t x : xs) { GgufValue e = scalar(GgufType::INT32); e.i = x; v.arr.push_back(e); }
  set(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
  tensors_.push_back({name, type, std::move(ne), std::move(bytes)});
}

void GgufWriter::add_f32_tensor(const std::string& name, std::vector<int64_t> ne, const float* data) {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  std::vector<uint8_t> b(static_cast<size_t>(n) * 4);
  std::memcpy(b.data(), data, b.size());
  add_tensor(name, DType::F32, std::move(ne), std::move(b));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size() + (alignment_ != 32 ? 1 : 0));
  for (const auto& [k, v] : kv_) {
    put_str(out, k);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    put_value(out, v);
  }
  if (alignment_ != 32) {
    put_str(out, "general.alignment");
    put<uint32_t>(out, static_cast<uint32_t>(GgufType::UINT32));
    put<uint32_t>(out, alignment_);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += (t.bytes.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  const size_t base = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(base + offsets[i], 0);
    out.insert(out.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
  }
  return out;
}

void GgufWriter::write(const std::string& path) const { write_file(path, to_bytes()); }

std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsEntry>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 8) hs += ' ';
  std::vector<uint8_t> out;
  put<uint64_t>(out, hs.size());
  out.insert(out.end(), hs.begin(), hs.end());
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path + ": cannot create");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) fail(path + ": write error");
}

void write_file(const std::string& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace slake
