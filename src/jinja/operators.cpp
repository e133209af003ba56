// Python's operators and jinja2's attribute and item lookup: obj.name tries the attribute (a
// method) then the item, obj[key] the item then the attribute; a miss is an Undefined that says
// what was missing. Methods that change a list or dict are refused, as jinja2's
// ImmutableSandboxedEnvironment refuses them.
#include <climits>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "interpreter.h"
#include "text.h"

namespace slake::jinja {

namespace {

std::string object_type(const Value& v) {
  if (v.is_none()) return "None";
  return std::string(v.type_name()) + " object";
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined("'" + object_type(obj) + "' has no attribute '" + name + "'");
}

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
  raise(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

void require_defined(const Value& v) {
  if (v.is_undefined()) raise(v.str().empty() ? "undefined value" : v.str());
}

using IntOp = bool (*)(int64_t, int64_t, int64_t*);
Value checked(IntOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) raise("integer overflow (slake's integers are 64-bit)");
  return Value(r);
}
bool add(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value("") : Value::list();
  if (seq.is_string()) {
    if (seq.str().size() > 0 && static_cast<uint64_t>(n) > in.limits().max_output / seq.str().size() + 1)
      in.charge_string(in.limits().max_output + 1);
    in.charge_string(seq.str().size() * static_cast<size_t>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(out);
  }
  if (!seq.items().empty() && static_cast<uint64_t>(n) > in.limits().max_items / seq.items().size() + 1)
    in.charge_list(in.limits().max_items + 1);
  in.charge_list(seq.items().size() * static_cast<size_t>(n));
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out));
}

// markupsafe.escape.
std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

// A bound method of a str, list or dict; an unknown name gives an undefined Value().
Value method(const Value& obj, const std::string& name);

}  // namespace

List iterate(const Value& v) {
  if (v.is_list()) return v.items();
  if (v.is_undefined()) return {};
  if (v.is_dict()) {
    List keys;
    for (const auto& e : v.dict_ref().entries) keys.push_back(e.first);
    return keys;
  }
  if (v.is_string()) {
    List out;
    for (auto& cp : code_points(v.str())) out.emplace_back(cp);
    return out;
  }
  raise(std::string("'") + v.type_name() + "' object is not iterable");
}

bool contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string())
      raise(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
    return c.str().find(item.str()) != std::string::npos;
  }
  if (c.is_list()) {
    for (const Value& v : c.items())
      if (equal(v, item)) return true;
    return false;
  }
  if (c.is_dict()) return c.dict_ref().find(item) != nullptr;
  if (c.is_undefined()) return false;
  raise(std::string("argument of type '") + c.type_name() + "' is not iterable");
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.to_str() + b.to_str();
    in.charge_string(s.size());
    return Value(std::move(s));
  }
  if (op == "==") return Value(equal(a, b));
  if (op == "!=") return Value(!equal(a, b));
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  require_defined(a);
  require_defined(b);
  if (op == "<") return Value(compare(a, b) < 0);
  if (op == ">") return Value(compare(a, b) > 0);
  if (op == "<=") return Value(compare(a, b) <= 0);
  if (op == ">=") return Value(compare(a, b) >= 0);
  const bool ints = a.is_number() && b.is_number() && !a.is_float() && !b.is_float();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return checked(add, a.as_int(), b.as_int());
    if (nums) return Value(a.as_number() + b.as_number());
    if (a.is_string() && b.is_string()) {
      in.charge_string(a.str().size() + b.str().size());
      if (a.is_markup() || b.is_markup())
        return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) + (b.is_markup() ? b.str() : html_escape(b.str())));
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      in.charge_list(a.items().size() + b.items().size());
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out));
    }
    if (a.is_string()) raise(std::string("can only concatenate str (not \"") + b.type_name() + "\") to str");
    if (a.is_list()) raise(std::string("can only concatenate list (not \"") + b.type_name() + "\") to list");
    type_error("+", a, b);
  }
  if (op == "-") {
    if (ints) return checked(sub, a.as_int(), b.as_int());
    if (nums) return Value(a.as_number() - b.as_number());
    type_error("-", a, b);
  }
  if (op == "*") {
    if (ints) return checked(mul, a.as_int(), b.as_int());
    if (nums) return Value(a.as_number() * b.as_number());
    if ((a.is_string() || a.is_list()) && b.is_number() && !b.is_float()) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_number() && !a.is_float()) return repeat(in, b, a.as_int());
    type_error("*", a, b);
  }
  if (op == "/") {
    if (!nums) type_error("/", a, b);
    if (b.as_number() == 0) raise("division by zero");
    return Value(a.as_number() / b.as_number());
  }
  if (op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string()) raise("printf-style string formatting ('...' % x) is not supported");
      type_error(op.c_str(), a, b);
    }
    if (b.as_number() == 0) raise(ints ? "integer division or modulo by zero" : "float floor division by zero");
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) raise("integer overflow (slake's integers are 64-bit)");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return op == "//" ? Value(q) : Value(m);
    }
    const double x = a.as_number(), y = b.as_number();
    return op == "//" ? Value(std::floor((x - floor_mod(x, y)) / y + 0.5 - 0.5)) : Value(floor_mod(x, y));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t acc = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        if (__builtin_mul_overflow(acc, base, &acc)) raise("integer overflow (slake's integers are 64-bit)");
        if (acc == 0 || acc == 1) break;
      }
      return Value(acc);
    }
    if (nums) return Value(std::pow(a.as_number(), b.as_number()));
    type_error("** or pow()", a, b);
  }
  raise("unknown operator " + op);
}

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (obj.is_dict() && obj.dict_ref().is_namespace) {
    const Value* v = obj.dict_ref().find(name);
    return v ? *v : missing_attr(obj, name);
  }
  Value m = method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    const Value* v = obj.dict_ref().find(name);
    if (v) return *v;
  }
  return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_list() || obj.is_string()) {
    if (key.is_number() && !key.is_float()) {
      int64_t i = key.as_int();
      if (obj.is_list()) {
        const int64_t n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
      } else {
        const auto cps = code_points(obj.str());
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(cps[static_cast<size_t>(i)]);
      }
      return Value::undefined(object_type(obj) + " has no element " + key.repr());
    }
  } else if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(object_type(obj) + " has no element " + key.repr());
}

Value slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto as_index = [](const Value& v, const char* what) -> int64_t {
    if (!v.is_number() || v.is_float()) raise(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  const int64_t st = step.is_none() ? 1 : as_index(step, "step");
  if (st == 0) raise("slice step cannot be zero");
  List items;
  std::vector<std::string> cps;
  if (obj.is_list()) items = obj.items();
  else if (obj.is_string()) cps = code_points(obj.str());
  else raise(std::string("'") + obj.type_name() + "' object is not subscriptable");
  const int64_t n = static_cast<int64_t>(obj.is_list() ? items.size() : cps.size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t dflt, const char* what) {
    if (v.is_none()) return dflt;
    int64_t i = as_index(v, what);
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(start, st < 0 ? n - 1 : 0, "start");
  const int64_t e = adjust(stop, st < 0 ? -1 : n, "stop");
  List out_items;
  std::string out_str;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_list()) out_items.push_back(items[static_cast<size_t>(i)]);
    else out_str += cps[static_cast<size_t>(i)];
  }
  if (obj.is_list()) {
    in.charge_list(out_items.size());
    return Value::list(std::move(out_items));
  }
  in.charge_string(out_str.size());
  return Value(out_str);
}

namespace {

const std::string* opt_string(const Args& a, const char* name, size_t i) {
  const Value* v = a.get(name, i);
  if (!v || v->is_none()) return nullptr;
  if (!v->is_string()) raise(std::string(name) + " must be a string");
  return &v->str();
}

const std::string& req_string(const Args& a, const char* name, size_t i) {
  const Value* v = a.get(name, i);
  if (!v || !v->is_string()) raise(std::string("expected a string for ") + name);
  return v->str();
}

long opt_long(const Args& a, const char* name, size_t i, long dflt) {
  const Value* v = a.get(name, i);
  if (!v || v->is_none()) return dflt;
  if (!v->is_number() || v->is_float()) raise(std::string(name) + " must be an integer");
  return static_cast<long>(v->as_int());
}

Value string_list(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

bool affix(const Value& obj, const Args& a, bool prefix) {
  const Value* v = a.get("prefix", 0);
  if (!v) raise(prefix ? "startswith() takes at least 1 argument" : "endswith() takes at least 1 argument");
  List options = v->is_list() ? v->items() : List{*v};
  const std::string& s = obj.str();
  for (const Value& o : options) {
    if (!o.is_string()) raise("startswith/endswith first arg must be str or a tuple of str");
    const std::string& p = o.str();
    if (p.size() <= s.size() && (prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0))
      return true;
  }
  return false;
}

// The methods of str, list and dict, one function each, found by name in the tables below. A
// method gets the object and the name it was looked up by, and gives the bound callable; `self`
// is a copy of the object, sharing a list's or dict's contents as Python's bound methods do.
using Method = Value (*)(const Value& self, const std::string& name);

// What jinja2's ImmutableSandboxedEnvironment gives for a method that would change a list or dict:
// a callable that raises when called.
Value unsafe(const Value& self, const std::string& name) {
  const std::string msg = "access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.";
  return Value::callable(name, [msg](Interpreter&, Args&) -> Value { raise(msg); });
}

// strip, lstrip and rstrip.
Value str_strip(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Interpreter&, Args& a) {
    return Value(py_strip(self.str(), opt_string(a, "chars", 0), name != "rstrip", name != "lstrip"));
  });
}

Value str_split(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args& a) {
    const std::string* sep = opt_string(a, "sep", 0);
    if (sep && sep->empty()) raise("empty separator");
    return string_list(py_split(self.str(), sep, opt_long(a, "maxsplit", 1, -1)));
  });
}

Value str_splitlines(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args&) { return string_list(py_splitlines(self.str())); });
}

// startswith and endswith.
Value str_affix(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Interpreter&, Args& a) { return Value(affix(self, a, name == "startswith")); });
}

Value str_replace(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter& in, Args& a) {
    std::string r = py_replace(self.str(), req_string(a, "old", 0), req_string(a, "new", 1), opt_long(a, "count", 2, -1));
    in.charge_string(r.size());
    return Value(std::move(r));
  });
}

Value str_upper(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args&) { return Value(py_upper(self.str())); });
}
Value str_lower(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args&) { return Value(py_lower(self.str())); });
}
Value str_title(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args&) { return Value(py_title(self.str())); });
}
Value str_capitalize(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args&) { return Value(py_capitalize(self.str())); });
}

// find, rfind and index: the position in code points; -1 when missing (index raises).
Value str_find(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Interpreter&, Args& a) -> Value {
    const std::string& sub = req_string(a, "sub", 0);
    const std::string& s = self.str();
    const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name == "index") raise("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(code_point_count(s.substr(0, at))));
  });
}

// Non-overlapping occurrences; Python counts the empty string once per code point, plus one.
Value str_count(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args& a) -> Value {
    const std::string& sub = req_string(a, "sub", 0);
    const std::string& s = self.str();
    if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  });
}

Value str_join(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter& in, Args& a) {
    const Value* v = a.get("iterable", 0);
    if (!v) raise("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(*v)) {
      if (!x.is_string()) raise(std::string("sequence item: expected str instance, ") + x.type_name() + " found");
      if (!first) out += self.str();
      out += x.str();
      first = false;
      in.charge_string(out.size());
    }
    return Value(out);
  });
}

// isdigit, isalpha, isspace, isalnum, isupper and islower, on ASCII (bytes) classes.
Value str_is(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Interpreter&, Args&) {
    const std::string& s = self.str();
    bool any_cased = false, ok = !s.empty();
    for (unsigned char c : s) {
      if (name == "isdigit") ok = ok && std::isdigit(c);
      else if (name == "isalpha") ok = ok && std::isalpha(c);
      else if (name == "isalnum") ok = ok && std::isalnum(c);
      else if (name == "isspace") ok = ok && std::isspace(c);
      else if (name == "isupper") ok = ok && !std::islower(c), any_cased = any_cased || std::isupper(c);
      else ok = ok && !std::isupper(c), any_cased = any_cased || std::islower(c);
    }
    if (name == "isupper" || name == "islower") ok = ok && any_cased;
    return Value(ok);
  });
}

// list.index and list.count.
Value list_index(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Interpreter&, Args& a) -> Value {
    const Value* x = a.get("value", 0);
    if (!x) raise(name + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t i = 0; i < self.items().size(); ++i)
      if (equal(self.items()[i], *x)) {
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
    if (name == "index") raise(x->repr() + " is not in list");
    return Value(n);
  });
}

// items, keys and values: lists, copied when called.
Value dict_view(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Interpreter&, Args&) {
    List out;
    for (const auto& [k, v] : self.dict_ref().entries) {
      if (name == "items") out.push_back(Value::tuple({k, v}));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  });
}

Value dict_get(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args& a) -> Value {
    const Value* k = a.get("key", 0);
    if (!k) raise("get expected at least 1 argument, got 0");
    if (const Value* v = self.dict_ref().find(*k)) return *v;
    const Value* d = a.get("default", 1);
    return d ? *d : Value::none();
  });
}

Value dict_copy(const Value& self, const std::string& name) {
  return Value::callable(name, [self](Interpreter&, Args&) {
    Value d = Value::dict();
    for (const auto& [k, v] : self.dict_ref().entries) d.dict_ref().set(k, v);
    return d;
  });
}

using MethodTable = std::unordered_map<std::string_view, Method>;

const MethodTable& string_methods() {
  static const MethodTable table{
      {"strip", str_strip}, {"lstrip", str_strip}, {"rstrip", str_strip},
      {"split", str_split}, {"splitlines", str_splitlines},
      {"startswith", str_affix}, {"endswith", str_affix},
      {"replace", str_replace}, {"join", str_join},
      {"upper", str_upper}, {"lower", str_lower}, {"title", str_title}, {"capitalize", str_capitalize},
      {"find", str_find}, {"rfind", str_find}, {"index", str_find}, {"count", str_count},
      {"isdigit", str_is}, {"isalpha", str_is}, {"isspace", str_is}, {"isalnum", str_is}, {"isupper", str_is}, {"islower", str_is},
  };
  return table;
}

const MethodTable& list_methods() {
  static const MethodTable table{
      {"index", list_index}, {"count", list_index},
      {"append", unsafe}, {"extend", unsafe}, {"insert", unsafe}, {"pop", unsafe},
      {"remove", unsafe}, {"reverse", unsafe}, {"sort", unsafe}, {"clear", unsafe},
  };
  return table;
}

const MethodTable& dict_methods() {
  static const MethodTable table{
      {"items", dict_view}, {"keys", dict_view}, {"values", dict_view}, {"get", dict_get}, {"copy", dict_copy},
      {"pop", unsafe}, {"popitem", unsafe}, {"setdefault", unsafe}, {"update", unsafe}, {"clear", unsafe},
  };
  return table;
}

Value method(const Value& obj, const std::string& name) {
  const MethodTable* table = obj.is_string() ? &string_methods() : obj.is_list() ? &list_methods() : obj.is_dict() ? &dict_methods() : nullptr;
  if (!table) return Value();
  const auto it = table->find(name);
  return it == table->end() ? Value() : it->second(obj, name);
}

}  // namespace

}  // namespace slake::jinja
