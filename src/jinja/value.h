// The values a template computes with: Python's None, bool, int, float, str, list and dict (keys
// kept in insertion order, as Python's), jinja2's Undefined, and callables (globals, macros,
// caller). Lists and dicts are shared by reference, as in Python; a namespace() is a dict whose
// attributes `set` may assign.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace slake::jinja {

class Interpreter;
class Value;

// Thrown by the builtins and the interpreter; the renderer turns it into a slake::Error with the
// template's name and line.
struct RenderError {
  std::string message;
  int line = 0;  // 0: not known where it was raised; the interpreter adds it
};
[[noreturn]] void raise(const std::string& message);

using List = std::vector<Value>;

struct Dict;

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword `name`, else positional `index`, else nullptr.
  const Value* get(const std::string& name, size_t index) const;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, Args&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string name) {
    Value v;
    v.s_ = std::move(name);
    return v;
  }
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), s_(s) {}
  static Value list(List items = {});
  // A Python tuple: a list that prints as (a, b).
  static Value tuple(List items);
  // What jinja2's map, select and reject give: a generator, which can be iterated but has no
  // len(), no JSON and prints as "<generator object ...>".
  static Value generator(List items);
  bool is_generator() const { return seq_ == 2; }
  // A string marked safe (jinja2's Markup, from |safe): adding a plain string to it escapes
  // that string for HTML, as Markup.__add__ does.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.seq_ = 3;
    return v;
  }
  bool is_markup() const { return kind_ == Kind::String && seq_ == 3; }
  static Value dict();
  static Value namespace_();
  static Value callable(std::string name, std::function<Value(Interpreter&, Args&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }   // int or bool
  double as_number() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return s_; }  // a string, or the name of an undefined value
  List& items() const { return *list_; }
  Dict& dict_ref() const { return *dict_; }
  const Callable& fn() const { return *fn_; }
  bool same_object(const Value& o) const;

  // Python's bool(x); undefined is false.
  bool truthy() const;
  // str(x) as {{ x }} prints it: strings as they are, the rest as Python's str() (repr inside
  // containers); undefined prints as nothing.
  std::string to_str() const;
  // Python's repr(x).
  std::string repr() const;
  // A short type name for messages ("str", "list", ...).
  const char* type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::Undefined;
  uint8_t seq_ = 0;  // a List: 0 list, 1 tuple, 2 generator; a String: 3 Markup
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

struct Dict {
  std::vector<std::pair<Value, Value>> entries;  // keys are strings, ints, floats, bools or None
  bool is_namespace = false;
  std::unordered_map<std::string, size_t> string_keys;  // entries' index by key, for string keys

  Value* find(const Value& key);
  Value* find(const std::string& key) { return find(Value(key)); }
  void set(const Value& key, Value v);
};

// Python's ==, and <, > etc. (which raise for mixed types).
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; raises when not comparable

// Python's repr(float): the shortest text that reads back to the same double.
std::string float_repr(double d);
// repr(str): quoted as Python quotes it.
std::string string_repr(const std::string& s);

}  // namespace slake::jinja
