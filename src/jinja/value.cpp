// Values and their Python spellings: str(), repr(), ==, < and truthiness as Python has them, so
// that what a template prints matches jinja2 byte for byte.
#include "value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace slake::jinja {

void raise(const std::string& message) { throw RenderError{message}; }

const Value* Args::get(const std::string& name, size_t index) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::list(List items) {
  Value v(Kind::List);
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.seq_ = 1;
  return v;
}

Value Value::generator(List items) {
  Value v = list(std::move(items));
  v.seq_ = 2;
  return v;
}

Value Value::dict() {
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<Dict>();
  return v;
}

Value Value::namespace_() {
  Value v = dict();
  v.dict_->is_namespace = true;
  return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, Args&)> fn) {
  Value v(Kind::Callable);
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  if (kind_ == Kind::List) return list_ == o.list_;
  if (kind_ == Kind::Dict) return dict_ == o.dict_;
  if (kind_ == Kind::Callable) return fn_ == o.fn_;
  return equal(*this, o);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0;
    case Kind::String: return !s_.empty();
    case Kind::List: return seq_ == 2 || !list_->empty();
    case Kind::Dict: return !dict_->entries.empty();
    case Kind::Callable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return seq_ == 1 ? "tuple" : seq_ == 2 ? "generator" : "list";
    case Kind::Dict: return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::Callable: return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is [-]D[.DDD]e[+-]XX: the digits and the decimal exponent.
  std::string s = buf;
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[8];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) out = digits + std::string(int_len - digits.size(), '0') + ".0";
    else out = digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  return neg ? "-" + out : out;
}

namespace {

// The code point starting at s[i] (UTF-8), and its length; a stray byte reads as itself.
uint32_t decode_utf8(const std::string& s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + static_cast<size_t>(n) > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
  len = static_cast<size_t>(n);
  return cp;
}

}  // namespace

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = decode_utf8(s, i, len);
    char buf[16];
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<uint32_t>(q)) out += std::string("\\") + q;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else if (cp == 0x2028 || cp == 0x2029) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return out + q;
}

std::string Value::repr() const {
  // A namespace can hold itself; Python prints "[...]" there, here it is an error.
  static thread_local int depth = 0;
  struct Guard {
    Guard() {
      if (++depth > 200) {
        depth = 0;
        raise("a value nests too deeply (or contains itself) to be printed");
      }
    }
    ~Guard() { depth = depth > 0 ? depth - 1 : 0; }
  } guard;
  switch (kind_) {
    case Kind::String: return string_repr(s_);
    case Kind::List: {
      if (seq_ == 2) return "<generator object>";
      const bool tuple_ = seq_ == 1;
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::Dict: {
      if (dict_->is_namespace) {
        std::string out = "<Namespace {";
        for (size_t i = 0; i < dict_->entries.size(); ++i)
          out += (i ? ", " : "") + dict_->entries[i].first.repr() + ": " + dict_->entries[i].second.repr();
        return out + "}>";
      }
      std::string out = "{";
      for (size_t i = 0; i < dict_->entries.size(); ++i)
        out += (i ? ", " : "") + dict_->entries[i].first.repr() + ": " + dict_->entries[i].second.repr();
      return out + "}";
    }
    default: return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return i_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return float_repr(f_);
    case Kind::String: return s_;
    case Kind::Callable: return "<function " + fn_->name + ">";
    default: return repr();
  }
}

Value* Dict::find(const Value& key) {
  if (key.is_string()) {
    auto it = string_keys.find(key.str());
    return it == string_keys.end() ? nullptr : &entries[it->second].second;
  }
  for (auto& [k, v] : entries)
    if (equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(const Value& key, Value v) {
  if (Value* slot = find(key)) *slot = std::move(v);
  else {
    if (key.is_string()) string_keys.emplace(key.str(), entries.size());
    entries.emplace_back(key, std::move(v));
  }
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::List: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case K::Dict: {
      auto& x = a.dict_ref().entries;
      if (x.size() != b.dict_ref().entries.size()) return false;
      for (auto& [k, v] : x) {
        const Value* o = b.dict_ref().find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    return a.as_number() < b.as_number() ? -1 : a.as_number() > b.as_number();
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() > b.str();
  if (a.is_list() && b.is_list()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  raise(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace slake::jinja
