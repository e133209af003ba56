// The parsed template: expressions and statements, each with the line it starts on (for errors).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.h"

namespace slake::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // args (also a tuple, which jinja2 templates use as a list)
    Dict,     // args: key, value, key, value...
    Attr,     // a.name
    Item,     // a[b]
    Slice,    // a[b:c:d], each of b, c, d optional
    Call,     // a(args, kwargs)
    Filter,   // a | name(args, kwargs); a is null in a {% filter %} block
    Test,     // a is [not] name(args)
    Unary,    // op a: "-", "+", "not"
    Binary,   // a op b: arithmetic, "~", comparisons, "in", "not in", "and", "or"
    Cond,     // a if b else c (c optional)
  };
  Kind kind;
  int line;
  Value value;
  std::string name;  // Name, Attr, Filter, Test; the operator of Unary and Binary
  bool negated = false;  // Test: "is not"
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // conds[i] -> bodies[i]; else_body
    For,       // targets in expr [if cond]: body, else_body
    Set,       // targets = expr, or expr.attr = value (attr set), or a block (body)
    Macro,     // name(params = defaults): body
    CallBlock, // {% call(params) expr %} body {% endcall %}
    FilterBlock,  // {% filter expr %} body
    Break,
    Continue,
  };
  Kind kind;
  int line;
  std::string text;                 // Text; Macro's name; Set's attribute name
  ExprPtr expr, cond, value;        // For: expr = iterable, cond = filter; Set: expr = namespace (attr set)
  std::vector<std::string> targets;  // For and Set targets
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro and CallBlock parameters with defaults
  std::vector<ExprPtr> conds;       // If
  std::vector<Body> bodies;         // If: one per cond
  Body body, else_body;
  bool has_body = false;            // Set: a block set
};

struct Program {
  Body body;
};

}  // namespace slake::jinja
