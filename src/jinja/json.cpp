// JSON in (the render context, through nlohmann's ordered_json so that member order is kept) and
// out (tojson, as Python's json.dumps writes it: its separators, its float spelling, NaN and
// Infinity, non-ASCII kept unless ensure_ascii).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "interpreter.h"

namespace slake::jinja {

namespace {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u)) : Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::dict();
      for (const auto& [k, v] : j.items()) d.dict_ref().set(Value(k), from_json(v));
      return d;
    }
    default: return Value::none();
  }
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c >= 0x80 && ensure_ascii) {
      const int n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
      for (int k = 1; k < n && i + 1 < s.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(s[++i]) & 0x3F);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;  // < 0: no newlines
  std::string item_sep, key_sep;
  bool sort_keys, ensure_ascii;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  }

  std::string key_text(const Value& k) {
    if (k.is_string()) return k.str();
    if (k.is_bool()) return k.as_bool() ? "true" : "false";
    if (k.is_none()) return "null";
    if (k.is_number()) return k.to_str();
    raise(std::string("keys must be str, int, float, bool or None, not ") + k.type_name());
  }

  void write(const Value& v, int level) {
    if (level > 200) raise("tojson: the value nests too deeply (or refers to itself)");
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.as_int()); return;
      case Value::Kind::Float: {
        const double d = v.as_number();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
        return;
      }
      case Value::Kind::String: json_string(out, v.str(), ensure_ascii); return;
      case Value::Kind::List: {
        if (v.is_generator()) break;
        if (v.items().empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < v.items().size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          write(v.items()[i], level + 1);
        }
        if (indent >= 0) newline(level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        if (v.dict_ref().is_namespace) break;
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, x] : v.dict_ref().entries) entries.emplace_back(key_text(k), &x);
        if (sort_keys)
          std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        if (entries.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          json_string(out, entries[i].first, ensure_ascii);
          out += key_sep;
          write(*entries[i].second, level + 1);
        }
        if (indent >= 0) newline(level);
        out += '}';
        return;
      }
      default: break;
    }
    raise(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
  }
};

}  // namespace

Value from_json_text(const std::string& text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    raise(std::string("the render context is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) raise("the render context must be a JSON object");
  return from_json(j);
}

std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                    bool ensure_ascii) {
  JsonWriter w{indent, item_sep, key_sep, sort_keys, ensure_ascii, {}};
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace slake::jinja
