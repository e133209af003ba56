// Statement execution and expression evaluation. Errors carry the line of the innermost statement
// or expression being run; the limits of jinja.h are checked as the work is done.
#include "interpreter.h"

namespace slake::jinja {

struct Interpreter::DepthGuard {
  Interpreter& in;
  explicit DepthGuard(Interpreter& i) : in(i) {
    if (++in.depth_ > in.limits_.max_depth)
      raise("the template nests or recurses deeper than " + std::to_string(in.limits_.max_depth) + " levels");
  }
  ~DepthGuard() { --in.depth_; }
};

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    raise("the template ran more than " + std::to_string(limits_.max_steps) + " statements and loop iterations");
}

void Interpreter::charge_string(size_t size) {
  if (size > limits_.max_output)
    raise("the template built a string of more than " + std::to_string(limits_.max_output) + " bytes");
  work_bytes_ += size;
  if (work_bytes_ > limits_.max_work_bytes)
    raise("the template built more than " + std::to_string(limits_.max_work_bytes) + " bytes of strings");
}

void Interpreter::charge_list(size_t size) {
  if (size > limits_.max_items)
    raise("the template built a list of more than " + std::to_string(limits_.max_items) + " items");
  work_bytes_ += size * sizeof(Value) / 8;
  if (work_bytes_ > limits_.max_work_bytes)
    raise("the template built more than " + std::to_string(limits_.max_work_bytes) + " bytes of data");
}

void Interpreter::emit(std::string& out, const std::string& text) {
  if (out.size() + text.size() > limits_.max_output)
    raise("the output would exceed " + std::to_string(limits_.max_output) + " bytes");
  out += text;
}

std::string Interpreter::render(const Program& program, std::shared_ptr<Scope> globals) {
  auto scope = std::make_shared<Scope>();
  scope->parent = std::move(globals);
  std::string out;
  try {
    exec(program.body, scope, out);
  } catch (RenderError& e) {
    if (e.line == 0) e.line = line_;
    throw;
  }
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  DepthGuard g(*this);
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  step();
  line_ = s.line;
  switch (s.kind) {
    case Stmt::Kind::Text: emit(out, s.text); break;
    case Stmt::Kind::Output: {
      const Value v = eval(*s.expr, scope);
      line_ = s.line;
      emit(out, v.to_str());
      break;
    }
    case Stmt::Kind::If:
      for (size_t i = 0; i < s.conds.size(); ++i)
        if (eval(*s.conds[i], scope).truthy()) return exec(s.bodies[i], scope, out);
      return exec(s.else_body, scope, out);
    case Stmt::Kind::For: exec_for(s, scope, out); break;
    case Stmt::Kind::Set: exec_set(s, scope, out); break;
    case Stmt::Kind::Macro: scope->vars[s.text] = make_macro(s, scope); break;
    case Stmt::Kind::CallBlock: {
      const Stmt* stmt = &s;
      std::weak_ptr<Scope> weak = scope;
      Value caller = Value::callable("caller", [stmt, weak](Interpreter& in, Args& args) -> Value {
        auto def = weak.lock();
        if (!def) raise("caller() called after its call block ended");
        auto local = std::make_shared<Scope>();
        local->parent = def;
        for (size_t i = 0; i < stmt->params.size(); ++i) {
          const Value* a = args.get(stmt->params[i].first, i);
          local->vars[stmt->params[i].first] =
              a ? *a : stmt->params[i].second ? in.eval(*stmt->params[i].second, local) : Value::undefined("'" + stmt->params[i].first + "' is undefined");
        }
        std::string text;
        in.exec(stmt->body, local, text);
        return Value(text);
      });
      const Expr& call = *s.expr;
      Value fn = eval(*call.a, scope);
      Args args = eval_args(call, scope);
      args.keyword.emplace_back("caller", caller);
      emit(out, this->call(fn, args).to_str());
      break;
    }
    case Stmt::Kind::FilterBlock: {
      std::string text;
      exec(s.body, scope, text);
      Value v(text);
      // The chain's innermost filter has no input: it gets the block's text.
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f; f = f->a.get()) chain.insert(chain.begin(), f);
      for (const Expr* f : chain) {
        Args args = eval_args(*f, scope);
        v = apply_filter(*this, f->name, v, args);
      }
      emit(out, v.to_str());
      break;
    }
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  const Value seq = eval(*s.expr, scope);
  if (!seq.is_list() && !seq.is_dict() && !seq.is_string() && !seq.is_undefined())
    raise(std::string("'") + seq.type_name() + "' object is not iterable");
  List items = iterate(seq);
  auto bind = [&](Scope& sc, const Value& item) {
    if (s.targets.size() == 1) {
      sc.vars[s.targets[0]] = item;
      return;
    }
    const List parts = iterate(item);
    if (parts.size() != s.targets.size())
      raise("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " names");
    for (size_t k = 0; k < parts.size(); ++k) sc.vars[s.targets[k]] = parts[k];
  };
  if (s.cond) {  // {% for x in xs if cond %}: the filter runs before loop.* is counted
    List kept;
    for (const Value& item : items) {
      step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      bind(*probe, item);
      if (eval(*s.cond, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step();
    auto body_scope = std::make_shared<Scope>();
    body_scope->parent = scope;
    Value loop = Value::dict();
    Dict& d = loop.dict_ref();
    d.set("index", Value(i + 1));
    d.set("index0", Value(i));
    d.set("revindex", Value(n - i));
    d.set("revindex0", Value(n - i - 1));
    d.set("first", Value(i == 0));
    d.set("last", Value(i == n - 1));
    d.set("length", Value(n));
    d.set("depth", Value(1));
    d.set("depth0", Value(0));
    d.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    d.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    d.set("cycle", Value::callable("loop.cycle", [i](Interpreter&, Args& a) -> Value {
            if (a.positional.empty()) raise("no items for cycling given");
            return a.positional[static_cast<size_t>(i) % a.positional.size()];
          }));
    body_scope->vars["loop"] = loop;
    bind(*body_scope, items[static_cast<size_t>(i)]);
    if (exec(s.body, body_scope, out) == Flow::Break) break;
  }
  if (n == 0) exec(s.else_body, scope, out);
}

void Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  (void)out;
  Value v;
  if (s.has_body) {
    std::string text;
    exec(s.body, scope, text);
    v = Value(text);
    if (s.cond) {
      std::vector<const Expr*> chain;
      for (const Expr* f = s.cond.get(); f; f = f->a.get()) chain.insert(chain.begin(), f);
      for (const Expr* f : chain) {
        Args args = eval_args(*f, scope);
        v = apply_filter(*this, f->name, v, args);
      }
    }
  } else {
    v = eval(*s.value, scope);
  }
  line_ = s.line;
  if (s.expr) {  // set ns.attr = value
    const Value target = eval(*s.expr, scope);
    if (!target.is_dict() || !target.dict_ref().is_namespace)
      raise("cannot assign attribute on non-namespace object");
    target.dict_ref().set(Value(s.text), v);
    return;
  }
  if (s.targets.size() == 1) {
    scope->vars[s.targets[0]] = v;
    return;
  }
  const List parts = iterate(v);
  if (parts.size() != s.targets.size())
    raise("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " names");
  for (size_t k = 0; k < parts.size(); ++k) scope->vars[s.targets[k]] = parts[k];
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  const Stmt* stmt = &s;
  // A weak reference: the macro lives in the scope it closes over.
  std::weak_ptr<Scope> weak = scope;
  return Value::callable(s.text, [stmt, weak](Interpreter& in, Args& args) -> Value {
    auto def = weak.lock();
    if (!def) raise("macro '" + stmt->text + "' called after the scope it was defined in ended");
    DepthGuard g(in);
    auto local = std::make_shared<Scope>();
    local->parent = def;
    const size_t n = stmt->params.size();
    List varargs;
    for (size_t i = n; i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
    Value kwargs = Value::dict();
    for (size_t i = 0; i < n; ++i) {
      const std::string& p = stmt->params[i].first;
      const Value* a = args.get(p, i);
      if (a) local->vars[p] = *a;
      else if (stmt->params[i].second) local->vars[p] = in.eval(*stmt->params[i].second, local);
      else local->vars[p] = Value::undefined("'" + p + "' is undefined");
    }
    Value caller;
    for (const auto& [k, v] : args.keyword) {
      bool known = false;
      for (const auto& p : stmt->params) known = known || p.first == k;
      if (k == "caller") caller = v;
      else if (!known) kwargs.dict_ref().set(Value(k), v);
    }
    if (!caller.is_undefined()) local->vars["caller"] = caller;
    local->vars["varargs"] = Value::list(std::move(varargs));
    local->vars["kwargs"] = kwargs;
    std::string text;
    in.exec(stmt->body, local, text);
    return Value(text);
  });
}

Value Interpreter::call(const Value& fn, Args& args) {
  if (!fn.is_callable()) {
    if (fn.is_undefined()) raise(fn.str().empty() ? "undefined value is not callable" : fn.str());
    raise(std::string("'") + fn.type_name() + "' object is not callable");
  }
  DepthGuard g(*this);
  return fn.fn().call(*this, args);
}

Args Interpreter::eval_args(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Args a;
  for (const auto& x : e.args) a.positional.push_back(eval(*x, scope));
  for (const auto& [k, x] : e.kwargs) a.keyword.emplace_back(k, eval(*x, scope));
  return a;
}

Value Interpreter::filter(const std::string& name, const Value& input, Args& args) {
  return apply_filter(*this, name, input, args);
}

bool Interpreter::test(const std::string& name, const Value& input, Args& args) {
  return apply_test(*this, name, input, args);
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  DepthGuard g(*this);
  line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: {
      const Value* v = scope->lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::List: {
      List items;
      for (const auto& x : e.args) items.push_back(eval(*x, scope));
      return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::Dict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (k.is_list() || k.is_dict() || k.is_undefined()) raise(std::string("unhashable type: '") + k.type_name() + "'");
        d.dict_ref().set(k, eval(*e.args[i + 1], scope));
      }
      return d;
    }
    case Expr::Kind::Attr: {
      const Value obj = eval(*e.a, scope);
      line_ = e.line;
      return get_attr(obj, e.name);
    }
    case Expr::Kind::Item: {
      const Value obj = eval(*e.a, scope);
      const Value key = eval(*e.b, scope);
      line_ = e.line;
      return get_item(obj, key);
    }
    case Expr::Kind::Slice: {
      const Value obj = eval(*e.a, scope);
      const Value start = e.b ? eval(*e.b, scope) : Value::none();
      const Value stop = e.c ? eval(*e.c, scope) : Value::none();
      const Value st = e.d ? eval(*e.d, scope) : Value::none();
      line_ = e.line;
      return slice(*this, obj, start, stop, st);
    }
    case Expr::Kind::Call: {
      const Value fn = eval(*e.a, scope);
      Args args = eval_args(e, scope);
      line_ = e.line;
      return call(fn, args);
    }
    case Expr::Kind::Filter: {
      const Value input = eval(*e.a, scope);
      Args args = eval_args(e, scope);
      line_ = e.line;
      return apply_filter(*this, e.name, input, args);
    }
    case Expr::Kind::Test: {
      const Value input = eval(*e.a, scope);
      Args args = eval_args(e, scope);
      line_ = e.line;
      return Value(apply_test(*this, e.name, input, args) != e.negated);
    }
    case Expr::Kind::Unary: {
      const Value v = eval(*e.a, scope);
      line_ = e.line;
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) raise(v.str());
      if (!v.is_number()) raise("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_number());
      if (v.as_int() == INT64_MIN) raise("integer overflow");
      return Value(-v.as_int());
    }
    case Expr::Kind::Binary: return eval_binary(e, scope);
    case Expr::Kind::Cond: {
      if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
      return e.c ? eval(*e.c, scope) : Value::undefined("the inline if expression on line " + std::to_string(e.line) + " evaluated to false and no else section was defined.");
    }
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  // Python's and/or give an operand, not a bool.
  if (e.name == "and") {
    Value a = eval(*e.a, scope);
    return a.truthy() ? eval(*e.b, scope) : a;
  }
  if (e.name == "or") {
    Value a = eval(*e.a, scope);
    return a.truthy() ? a : eval(*e.b, scope);
  }
  const Value a = eval(*e.a, scope);
  const Value b = eval(*e.b, scope);
  line_ = e.line;
  return binary_op(*this, e.name, a, b);
}

}  // namespace slake::jinja
