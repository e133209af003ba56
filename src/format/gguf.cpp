#include "slake/format/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "slake/error.h"

namespace slake {

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

namespace {

constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;       // nested arrays deeper than this are refused
constexpr uint64_t kMaxStringLen = 1u << 30;

// Bounds-checked little-endian reader over the file bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& name) : p_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void error(const std::string& what) const {
    fail(name_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }

  void need(uint64_t n, const char* what) {
    if (n > remaining()) error(std::string("truncated file: ") + what + " runs past the end");
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringLen) error(std::string(what) + ": string length " + std::to_string(len) + " is absurd");
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

// Smallest encoded size of one value of `t`, used to bound element counts by the bytes left.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

GgufValue read_value(Reader& r, GgufType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::UINT8: v.u = r.read<uint8_t>("value"); break;
    case GgufType::INT8: v.i = r.read<int8_t>("value"); break;
    case GgufType::UINT16: v.u = r.read<uint16_t>("value"); break;
    case GgufType::INT16: v.i = r.read<int16_t>("value"); break;
    case GgufType::UINT32: v.u = r.read<uint32_t>("value"); break;
    case GgufType::INT32: v.i = r.read<int32_t>("value"); break;
    case GgufType::UINT64: v.u = r.read<uint64_t>("value"); break;
    case GgufType::INT64: v.i = r.read<int64_t>("value"); break;
    case GgufType::FLOAT32: v.f = r.read<float>("value"); break;
    case GgufType::FLOAT64: v.f = r.read<double>("value"); break;
    case GgufType::BOOL: {
      const uint8_t b = r.read<uint8_t>("value");
      if (b > 1) r.error("key " + key + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.u = b;
      break;
    }
    case GgufType::STRING: v.str = r.read_string("string value"); break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) r.error("key " + key + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      const uint32_t et = r.read<uint32_t>("array type");
      if (!valid_type(et)) r.error("key " + key + ": unknown array element type " + std::to_string(et));
      v.elem_type = static_cast<GgufType>(et);
      const uint64_t n = r.read<uint64_t>("array length");
      if (n > r.remaining() / min_encoded_size(v.elem_type))
        r.error("key " + key + ": array of " + std::to_string(n) + " elements cannot fit in the file");
      v.arr.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(r, v.elem_type, key, depth + 1));
      break;
    }
  }
  return v;
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) { return parse(map_file(path), path); }

GgufFile GgufFile::parse(std::shared_ptr<const ByteBuffer> buf, const std::string& name) {
  GgufFile g;
  g.name_ = name;
  g.buf_ = std::move(buf);
  const uint8_t* base = g.buf_->data();
  const size_t size = g.buf_->size();
  Reader r(base, size, g.name_);

  if (size < 4 || std::memcmp(base, "GGUF", 4) != 0) fail(name + ": not a GGUF file (bad magic)");
  r.read<uint32_t>("magic");
  g.version_ = r.read<uint32_t>("version");
  if (g.version_ != 2 && g.version_ != 3)
    fail(name + ": unsupported GGUF version " + std::to_string(g.version_) + " (2 and 3 are supported)");

  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info 8+4+8+4+8.
  if (n_kv > r.remaining() / 13) fail(name + ": metadata count " + std::to_string(n_kv) + " cannot fit in the file");
  if (n_tensors > r.remaining() / 32) fail(name + ": tensor count " + std::to_string(n_tensors) + " cannot fit in the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.read_string("metadata key");
    const uint32_t t = r.read<uint32_t>("metadata type");
    if (!valid_type(t)) r.error("key " + key + ": unknown value type " + std::to_string(t));
    GgufValue v = read_value(r, static_cast<GgufType>(t), key, 0);
    if (g.kv_index_.count(key)) r.error("duplicate metadata key " + key);
    g.kv_index_[key] = g.kv_.size();
    g.kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    if (a->type != GgufType::UINT32) fail(name + ": general.alignment must be uint32, got " + gguf_type_name(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail(name + ": general.alignment " + std::to_string(a->u) + " is not a power of two");
    g.alignment_ = static_cast<size_t>(a->u);
  }

  struct Info {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    uint64_t offset;
  };
  std::vector<Info> infos;
  infos.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Info in;
    in.name = r.read_string("tensor name");
    const uint32_t n_dims = r.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      r.error("tensor " + in.name + ": " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t v = r.read<uint64_t>("tensor dimension");
      if (v == 0 || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        r.error("tensor " + in.name + ": dimension " + std::to_string(d) + " has size " + std::to_string(v));
      in.ne.push_back(static_cast<int64_t>(v));
    }
    in.type = r.read<uint32_t>("tensor type");
    in.offset = r.read<uint64_t>("tensor offset");
    infos.push_back(std::move(in));
  }

  const size_t a = g.alignment_;
  const size_t pos = r.pos();
  g.data_offset_ = (pos + a - 1) / a * a;
  if (g.data_offset_ > size && n_tensors > 0) fail(name + ": truncated file: tensor data section is missing");
  const uint64_t data_size = size > g.data_offset_ ? size - g.data_offset_ : 0;

  struct Extent {
    uint64_t begin, end;
    size_t idx;
  };
  std::vector<Extent> extents;
  for (size_t k = 0; k < infos.size(); ++k) {
    Info& in = infos[k];
    const std::string where = name + ": tensor " + in.name;
    if (!dtype_supported(in.type)) {
      if (in.type <= 39) fail(where + ": tensor type " + ggml_type_name(in.type) + " is not supported");
      fail(where + ": unknown tensor type " + std::to_string(in.type));
    }
    const DType type = static_cast<DType>(in.type);
    const DTypeInfo& ti = dtype_info(type);
    if (in.ne[0] % ti.block_elems != 0)
      fail(where + ": row length " + std::to_string(in.ne[0]) + " is not a multiple of the " + ti.name +
           " block size " + std::to_string(ti.block_elems));
    // Byte size, with overflow checks on every product.
    uint64_t nbytes = static_cast<uint64_t>(in.ne[0] / ti.block_elems) * static_cast<uint64_t>(ti.block_bytes);
    if (static_cast<uint64_t>(in.ne[0] / ti.block_elems) > std::numeric_limits<uint64_t>::max() / ti.block_bytes)
      fail(where + ": shape " + shape_string(in.ne) + " is too large");
    for (size_t d = 1; d < in.ne.size(); ++d) {
      if (nbytes != 0 && static_cast<uint64_t>(in.ne[d]) > std::numeric_limits<uint64_t>::max() / nbytes)
        fail(where + ": shape " + shape_string(in.ne) + " is too large");
      nbytes *= static_cast<uint64_t>(in.ne[d]);
    }
    if (in.offset % a != 0) fail(where + ": offset " + std::to_string(in.offset) + " is not aligned to " + std::to_string(a));
    if (in.offset > data_size || nbytes > data_size - in.offset)
      fail(where + ": data [" + std::to_string(in.offset) + ", +" + std::to_string(nbytes) +
           ") lies outside the file's data section of " + std::to_string(data_size) + " bytes");
    if (g.tensor_index_.count(in.name)) fail(name + ": duplicate tensor name " + in.name);
    g.tensor_index_[in.name] = g.tensors_.size();
    TensorView tv;
    tv.name = in.name;
    tv.type = type;
    tv.ne = in.ne;
    tv.data = base + g.data_offset_ + in.offset;
    tv.nbytes = static_cast<size_t>(nbytes);
    g.tensors_.push_back(std::move(tv));
    extents.push_back({in.offset, in.offset + nbytes, k});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& x, const Extent& y) { return x.begin < y.begin; });
  for (size_t k = 1; k < extents.size(); ++k) {
    if (extents[k].begin < extents[k - 1].end)
      fail(name + ": tensors " + infos[extents[k - 1].idx].name + " and " + infos[extents[k].idx].name + " overlap");
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorView* GgufFile::find_tensor(const std::string& n) const {
  auto it = tensor_index_.find(n);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
uint64_t as_uint(const GgufValue& v, const std::string& file, const std::string& key) {
  if (v.type == GgufType::INT8 || v.type == GgufType::INT16 || v.type == GgufType::INT32 || v.type == GgufType::INT64) {
    if (v.i < 0) fail(file + ": key " + key + " is negative (" + std::to_string(v.i) + ")");
    return static_cast<uint64_t>(v.i);
  }
  if (v.is_integer()) return v.u;
  fail(file + ": key " + key + " has type " + gguf_type_name(v.type) + ", expected an integer");
}
}  // namespace

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(name_ + ": missing metadata key " + key);
  return as_uint(*v, name_, key);
}

uint64_t GgufFile::get_uint(const std::string& key, uint64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? as_uint(*v, name_, key) : fallback;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(name_ + ": missing metadata key " + key);
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(as_uint(*v, name_, key));
  fail(name_ + ": key " + key + " has type " + gguf_type_name(v->type) + ", expected a number");
}

double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(name_ + ": missing metadata key " + key);
  if (v->type != GgufType::STRING) fail(name_ + ": key " + key + " has type " + gguf_type_name(v->type) + ", expected string");
  return v->str;
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type != GgufType::BOOL) fail(name_ + ": key " + key + " has type " + gguf_type_name(v->type) + ", expected bool");
  return v->u != 0;
}

const GgufValue& GgufFile::get_array(const std::string& key, GgufType elem_type) const {
  const GgufValue* v = find(key);
  if (!v) fail(name_ + ": missing metadata key " + key);
  if (v->type != GgufType::ARRAY || v->elem_type != elem_type)
    fail(name_ + ": key " + key + " is not an array of " + gguf_type_name(elem_type));
  return *v;
}

}  // namespace slake
