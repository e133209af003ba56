// jinja2's filters and tests (those chat templates use), and the globals transformers adds:
// raise_exception, strftime_now; plus jinja2's own range, namespace and dict. tojson is
// transformers' override: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <string_view>
#include <unordered_map>

#include "interpreter.h"
#include "text.h"

namespace slake::jinja {

namespace {

const Value* arg(const Args& a, const char* name, size_t i) { return a.get(name, i); }

bool flag(const Args& a, const char* name, size_t i, bool dflt) {
  const Value* v = arg(a, name, i);
  return v ? v->truthy() : dflt;
}

int64_t length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(code_point_count(v.str()));
  if (v.is_list() && !v.is_generator()) return static_cast<int64_t>(v.items().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict_ref().entries.size());
  if (v.is_undefined()) return 0;
  raise(std::string("object of type '") + v.type_name() + "' has no len()");
}

// jinja2's attribute paths for map/selectattr/sort: "a.b" and "0".
Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  const std::string dot = ".";
  for (const auto& part : py_split(path, &dot, -1)) {
    const bool digits = !part.empty() && part.size() < 18 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(v, Value(part));
    if (v.is_undefined()) return v;
  }
  return v;
}

Args rest_args(const Args& a, size_t from) {
  Args r;
  for (size_t i = from; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  r.keyword = a.keyword;
  return r;
}

// select/reject/selectattr/rejectattr.
Value select(Interpreter& in, const Value& seq, const Args& a, bool by_attr, bool keep_if) {
  std::string attr;
  size_t next = 0;
  if (by_attr) {
    const Value* at = arg(a, "attribute", 0);
    if (!at || !at->is_string()) raise("selectattr/rejectattr need an attribute name");
    attr = at->str();
    next = 1;
  }
  const Value* test = next < a.positional.size() ? &a.positional[next] : nullptr;
  Args targs;
  if (test) {
    for (size_t i = next + 1; i < a.positional.size(); ++i) targs.positional.push_back(a.positional[i]);
  }
  List out;
  for (const Value& item : seq.truthy() ? iterate(seq) : List{}) {  // jinja2: "if value:"
    in.step();
    const Value v = by_attr ? attribute_of(item, attr) : item;
    bool ok;
    if (test) {
      if (!test->is_string()) raise("the test name must be a string");
      Args copy = targs;
      ok = apply_test(in, test->str(), v, copy);
    } else {
      ok = v.truthy();
    }
    if (ok == keep_if) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value to_int(const Value& v, const Value& dflt) {
  if (v.is_number()) return v.is_float() ? Value(static_cast<int64_t>(std::trunc(v.as_number()))) : Value(v.as_int());
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), nullptr, true, true);
    try {
      size_t used = 0;
      const long long i = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(static_cast<int64_t>(i));
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(std::trunc(d)));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value to_float(const Value& v, const Value& dflt) {
  if (v.is_number()) return Value(v.as_number());
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), nullptr, true, true);
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

std::string do_indent(std::string s, const Args& a) {
  const Value* w = arg(a, "width", 0);
  std::string ind = !w ? "    " : w->is_string() ? w->str() : std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(w->as_int(), 1 << 16))), ' ');
  const bool first = flag(a, "first", 1, false), blank = flag(a, "blank", 2, false);
  s += "\n";  // as jinja2 does, so that splitlines keeps a last empty line
  const auto lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  return first ? ind + rv : rv;
}

// The filters, one function each, found by name in filters() below. A filter gets the value before
// the | and the call's arguments; it charges what it builds (charge_string, step) as the operators do.
using Filter = Value (*)(Interpreter& in, const Value& v, Args& a);

Value filter_safe(Interpreter&, const Value& v, Args&) {
  return v.is_string() ? Value::markup(v.str()) : v.is_markup() ? v : Value::markup(v.to_str());
}

Value filter_trim(Interpreter&, const Value& v, Args& a) {
  const Value* chars = arg(a, "chars", 0);
  return Value(py_strip(v.to_str(), chars && chars->is_string() ? &chars->str() : nullptr, true, true));
}

Value filter_length(Interpreter&, const Value& v, Args&) { return Value(length(v)); }
Value filter_string(Interpreter&, const Value& v, Args&) { return v.is_string() ? v : Value(v.to_str()); }
Value filter_upper(Interpreter&, const Value& v, Args&) { return Value(py_upper(v.to_str())); }
Value filter_lower(Interpreter&, const Value& v, Args&) { return Value(py_lower(v.to_str())); }
Value filter_title(Interpreter&, const Value& v, Args&) { return Value(py_title(v.to_str())); }
Value filter_capitalize(Interpreter&, const Value& v, Args&) { return Value(py_capitalize(v.to_str())); }

Value filter_replace(Interpreter& in, const Value& v, Args& a) {
  const Value *o = arg(a, "old", 0), *n = arg(a, "new", 1), *c = arg(a, "count", 2);
  if (!o || !n) raise("replace needs the old and the new string");
  std::string r = py_replace(v.to_str(), o->to_str(), n->to_str(), c && !c->is_none() ? static_cast<long>(c->as_int()) : -1);
  in.charge_string(r.size());
  return Value(std::move(r));
}

Value filter_default(Interpreter&, const Value& v, Args& a) {
  const Value* d = arg(a, "default_value", 0);
  const bool boolean = flag(a, "boolean", 1, false);
  if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value("");
  return v;
}

Value filter_tojson(Interpreter& in, const Value& v, Args& a) {
  const Value* ind = arg(a, "indent", 0);
  const Value* seps = arg(a, "separators", 3);
  int indent = -1;
  if (ind && !ind->is_none()) {
    if (!ind->is_number() || ind->is_float()) raise("tojson: indent must be an integer");
    indent = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ind->as_int(), 64)));
  }
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (seps && !seps->is_none()) {
    if (!seps->is_list() || seps->items().size() != 2 || !seps->items()[0].is_string() || !seps->items()[1].is_string())
      raise("tojson: separators must be a pair of strings");
    item_sep = seps->items()[0].str();
    key_sep = seps->items()[1].str();
  }
  std::string out = to_json(v, indent, item_sep, key_sep, flag(a, "sort_keys", 4, false), flag(a, "ensure_ascii", 1, false));
  in.charge_string(out.size());
  return Value(std::move(out));
}

Value filter_join(Interpreter& in, const Value& v, Args& a) {
  const Value* sep = arg(a, "d", 0);
  const Value* attr = arg(a, "attribute", 1);
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep ? sep->to_str() : "";
    out += (attr && !attr->is_none() ? attribute_of(x, attr->to_str()) : x).to_str();
    first = false;
    in.charge_string(out.size());
  }
  return Value(out);
}

// first and last: on an empty sequence both give the same undefined.
Value end_item(const Value& v, bool first) {
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return first ? items.front() : items.back();
}
Value filter_first(Interpreter&, const Value& v, Args&) { return end_item(v, true); }
Value filter_last(Interpreter&, const Value& v, Args&) { return end_item(v, false); }

Value filter_list(Interpreter&, const Value& v, Args&) { return Value::list(iterate(v)); }

Value filter_items(Interpreter&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) raise("items: can only get item pairs from a mapping");
  List out;
  for (const auto& [k, x] : v.dict_ref().entries) out.push_back(Value::tuple({k, x}));
  return Value::list(std::move(out));
}

// map(attribute=..., default=...) or map('filter', args...), which applies that filter by name.
Value filter_map(Interpreter& in, const Value& v, Args& a) {
  List out;
  const Value* attr = nullptr;
  for (const auto& [k, x] : a.keyword)
    if (k == "attribute") attr = &x;
  for (const Value& item : v.truthy() ? iterate(v) : List{}) {
    in.step();
    if (attr) {
      Value r = attribute_of(item, attr->to_str());
      if (r.is_undefined()) {
        for (const auto& [k, x] : a.keyword)
          if (k == "default") r = x;
      }
      out.push_back(r);
    } else {
      if (a.positional.empty() || !a.positional[0].is_string()) raise("map needs a filter name or attribute=");
      Args rest = rest_args(a, 1);
      out.push_back(apply_filter(in, a.positional[0].str(), item, rest));
    }
  }
  return Value::generator(std::move(out));
}

Value filter_select(Interpreter& in, const Value& v, Args& a) { return select(in, v, a, false, true); }
Value filter_reject(Interpreter& in, const Value& v, Args& a) { return select(in, v, a, false, false); }
Value filter_selectattr(Interpreter& in, const Value& v, Args& a) { return select(in, v, a, true, true); }
Value filter_rejectattr(Interpreter& in, const Value& v, Args& a) { return select(in, v, a, true, false); }

Value filter_unique(Interpreter& in, const Value& v, Args& a) {
  const bool case_sensitive = flag(a, "case_sensitive", 0, false);
  List out, seen;
  for (const Value& x : iterate(v)) {
    in.step();
    Value key = x.is_string() && !case_sensitive ? Value(py_lower(x.str())) : x;
    bool dup = false;
    for (const Value& s : seen) dup = dup || equal(s, key);
    if (!dup) seen.push_back(key), out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value filter_int(Interpreter&, const Value& v, Args& a) {
  const Value* d = arg(a, "default", 0);
  return to_int(v, d ? *d : Value(0));
}

Value filter_float(Interpreter&, const Value& v, Args& a) {
  const Value* d = arg(a, "default", 0);
  return to_float(v, d ? *d : Value(0.0));
}

Value filter_abs(Interpreter&, const Value& v, Args&) {
  if (!v.is_number()) raise(std::string("bad operand type for abs(): '") + v.type_name() + "'");
  if (v.is_float()) return Value(std::fabs(v.as_number()));
  if (v.as_int() == INT64_MIN) raise("integer overflow");
  return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
}

Value filter_round(Interpreter&, const Value& v, Args& a) {
  const Value* p = arg(a, "precision", 0);
  const Value* m = arg(a, "method", 1);
  const int64_t prec = p ? p->as_int() : 0;
  const std::string method = m ? m->to_str() : "common";
  if (!v.is_number()) raise("round: the value must be a number");
  if (!v.is_float() && method == "common") return Value(v.as_int());
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_number() * scale;
  double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);
  return Value(r / scale);
}

Value filter_indent(Interpreter& in, const Value& v, Args& a) {
  std::string r = do_indent(v.to_str(), a);
  in.charge_string(r.size());
  return Value(std::move(r));
}

Value filter_sum(Interpreter& in, const Value& v, Args& a) {
  Value total = Value(static_cast<int64_t>(0));
  if (const Value* s = arg(a, "start", 1)) total = *s;
  const Value* attr = arg(a, "attribute", 0);
  for (const Value& x : iterate(v)) total = binary_op(in, "+", total, attr && !attr->is_none() ? attribute_of(x, attr->to_str()) : x);
  return total;
}

// min and max: the first of the smallest (largest), strings compared lower-cased unless case_sensitive.
Value extreme(const Value& v, const Args& a, bool min) {
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = flag(a, "case_sensitive", 0, false);
  Value best = items[0];
  for (const Value& x : items) {
    Value l = x.is_string() && !cs ? Value(py_lower(x.str())) : x, r = best.is_string() && !cs ? Value(py_lower(best.str())) : best;
    if (min ? compare(l, r) < 0 : compare(l, r) > 0) best = x;
  }
  return best;
}
Value filter_min(Interpreter&, const Value& v, Args& a) { return extreme(v, a, true); }
Value filter_max(Interpreter&, const Value& v, Args& a) { return extreme(v, a, false); }

Value filter_reverse(Interpreter&, const Value& v, Args&) {
  if (v.is_string()) {
    auto cps = code_points(v.str());
    std::string out;
    for (size_t i = cps.size(); i-- > 0;) out += cps[i];
    return Value(out);
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value filter_sort(Interpreter&, const Value& v, Args& a) {
  List items = iterate(v);
  const bool rev = flag(a, "reverse", 0, false), cs = flag(a, "case_sensitive", 1, false);
  const Value* attr = arg(a, "attribute", 2);
  auto key = [&](const Value& x) {
    Value k = attr && !attr->is_none() ? attribute_of(x, attr->to_str()) : x;
    return k.is_string() && !cs ? Value(py_lower(k.str())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return rev ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
  });
  return Value::list(std::move(items));
}

Value filter_dictsort(Interpreter&, const Value& v, Args& a) {
  if (!v.is_dict()) raise("dictsort: a mapping is required");
  List items;
  for (const auto& [k, x] : v.dict_ref().entries) items.push_back(Value::tuple({k, x}));
  const bool by_value = arg(a, "by", 1) && arg(a, "by", 1)->to_str() == "value";
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value& kx = x.items()[by_value], &ky = y.items()[by_value];
    return compare(kx.is_string() ? Value(py_lower(kx.str())) : kx, ky.is_string() ? Value(py_lower(ky.str())) : ky) < 0;
  });
  return Value::list(std::move(items));
}

Value filter_wordcount(Interpreter&, const Value& v, Args&) {
  return Value(static_cast<int64_t>(py_split(v.to_str(), nullptr, -1).size()));
}

// Every filter by name, built on first use. jinja2's e, escape and forceescape are not here: they
// fail as unknown filters.
const std::unordered_map<std::string_view, Filter>& filters() {
  static const std::unordered_map<std::string_view, Filter> table{
      {"safe", filter_safe},
      {"trim", filter_trim},
      {"length", filter_length},
      {"count", filter_length},
      {"string", filter_string},
      {"upper", filter_upper},
      {"lower", filter_lower},
      {"title", filter_title},
      {"capitalize", filter_capitalize},
      {"replace", filter_replace},
      {"default", filter_default},
      {"d", filter_default},
      {"tojson", filter_tojson},
      {"join", filter_join},
      {"first", filter_first},
      {"last", filter_last},
      {"list", filter_list},
      {"items", filter_items},
      {"map", filter_map},
      {"select", filter_select},
      {"reject", filter_reject},
      {"selectattr", filter_selectattr},
      {"rejectattr", filter_rejectattr},
      {"unique", filter_unique},
      {"int", filter_int},
      {"float", filter_float},
      {"abs", filter_abs},
      {"round", filter_round},
      {"indent", filter_indent},
      {"sum", filter_sum},
      {"min", filter_min},
      {"max", filter_max},
      {"reverse", filter_reverse},
      {"sort", filter_sort},
      {"dictsort", filter_dictsort},
      {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, Args& a) {
  const auto it = filters().find(name);
  if (it == filters().end()) raise("no filter named '" + name + "'");
  return it->second(in, v, a);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, Args& a) {
  (void)in;
  auto other = [&]() -> const Value& {
    const Value* o = arg(a, "other", 0);
    if (!o) raise("the test '" + name + "' needs an argument");
    return *o;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other()) < 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other()) > 0;
  if (name == "le" || name == "<=") return compare(v, other()) <= 0;
  if (name == "ge" || name == ">=") return compare(v, other()) >= 0;
  if (name == "in") return contains(other(), v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_number() || v.is_float()) raise("the test '" + name + "' needs an integer");
    if (name == "divisibleby") {
      const Value& d = other();
      if (!d.is_number() || d.is_float() || d.as_int() == 0) raise("divisibleby needs a non-zero integer");
      return v.as_int() % d.as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "lower") return v.is_string() && py_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && py_upper(v.str()) == v.str();
  raise("no test named '" + name + "'");
}

void add_globals(Scope& g) {
  g.vars["range"] = Value::callable("range", [](Interpreter& in, Args& a) -> Value {
    int64_t start = 0, stop, step = 1;
    for (const Value& x : a.positional)
      if (!x.is_number() || x.is_float()) raise("range() takes integers");
    if (a.positional.size() == 1) stop = a.positional[0].as_int();
    else if (a.positional.size() >= 2) start = a.positional[0].as_int(), stop = a.positional[1].as_int();
    else raise("range expected at least 1 argument, got 0");
    if (a.positional.size() >= 3) step = a.positional[2].as_int();
    if (step == 0) raise("range() arg 3 must not be zero");
    const double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    if (n > static_cast<double>(in.limits().max_items)) in.charge_list(in.limits().max_items + 1);
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
    in.charge_list(out.size());
    return Value::list(std::move(out));
  });
  auto make_dict = [](bool ns) {
    return [ns](Interpreter&, Args& a) -> Value {
      Value d = ns ? Value::namespace_() : Value::dict();
      for (const Value& p : a.positional) {
        if (!p.is_dict()) raise(ns ? "namespace() takes a mapping or keyword arguments" : "dict() takes a mapping");
        for (const auto& [k, x] : p.dict_ref().entries) d.dict_ref().set(k, x);
      }
      for (const auto& [k, x] : a.keyword) d.dict_ref().set(Value(k), x);
      return d;
    };
  };
  g.vars["namespace"] = Value::callable("namespace", make_dict(true));
  g.vars["dict"] = Value::callable("dict", make_dict(false));
  g.vars["raise_exception"] = Value::callable("raise_exception", [](Interpreter&, Args& a) -> Value {
    const Value* m = a.get("message", 0);
    raise(m ? m->to_str() : std::string("raise_exception() called"));
  });
  g.vars["strftime_now"] = Value::callable("strftime_now", [](Interpreter& in, Args& a) -> Value {
    const Value* f = a.get("format", 0);
    if (!f || !f->is_string()) raise("strftime_now needs a format string");
    if (f->str().size() > 256) raise("strftime_now: the format is too long");
    char buf[1024];
    const size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &in.now());
    return Value(std::string(buf, n));
  });
}

}  // namespace slake::jinja
