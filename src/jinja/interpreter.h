// Runs a Program: scopes as jinja2 has them (a for loop's body and a macro's body get their own;
// if does not), loop.*, macros and caller(), and the limits of jinja.h.
#pragma once
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "ast.h"
#include "slake/jinja.h"

namespace slake::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

class Interpreter {
 public:
  Interpreter(const Limits& limits, std::tm now) : limits_(limits), now_(now) {}

  // Renders `program` with `globals` as the outermost scope.
  std::string render(const Program& program, std::shared_ptr<Scope> globals);

  Value call(const Value& fn, Args& args);
  // Builds a string or list of `size` elements/bytes: raises past the limits of jinja.h.
  void charge_string(size_t size);
  void charge_list(size_t size);
  void step();
  const std::tm& now() const { return now_; }
  const Limits& limits() const { return limits_; }
  // The macro-style call of a filter or test by name with the input first (map('upper'), select('odd')).
  Value filter(const std::string& name, const Value& input, Args& args);
  bool test(const std::string& name, const Value& input, Args& args);

 private:
  enum class Flow { Normal, Break, Continue };
  struct DepthGuard;

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Args eval_args(const Expr& e, const std::shared_ptr<Scope>& scope);
  void emit(std::string& out, const std::string& text);

  Limits limits_;
  std::tm now_;
  int depth_ = 0;
  int64_t steps_ = 0;
  size_t work_bytes_ = 0;
  int line_ = 0;
};

// Operators and lookups, as Python and jinja2 define them (builtins.cpp).
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step);
bool contains(const Value& container, const Value& item);
// The elements a for loop visits: a list's, a dict's keys, a string's characters; none for undefined.
List iterate(const Value& v);
// jinja2's filters and tests by name; unknown names raise.
Value apply_filter(Interpreter& in, const std::string& name, const Value& input, Args& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& input, Args& args);
// The globals every template sees: range, namespace, dict, raise_exception, strftime_now.
void add_globals(Scope& scope);
// JSON text to a Value, and a Value to json.dumps' text.
Value from_json_text(const std::string& text);
std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool sort_keys, bool ensure_ascii);

}  // namespace slake::jinja
