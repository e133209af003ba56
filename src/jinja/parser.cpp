// A recursive-descent parser following jinja2's parser.py: the same precedence (or < and < not <
// comparisons < + - < ~ < * / // % < ** < unary < filters, tests and calls < postfix), the same
// statements as Hugging Face chat templates use (if, for with else and loop controls, set and
// block set, macro, call, filter blocks).
#include "parser.h"

#include <set>

namespace slake::jinja {

namespace {

[[noreturn]] void syntax_error(const std::string& msg, int line) { throw RenderError{msg, line}; }

class Parser {
 public:
  Parser(const std::vector<Token>& t, int max_depth) : t_(t), max_depth_(max_depth) {}

  Program program() {
    Program p;
    std::string end = body(p.body, {});
    (void)end;
    return p;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_)
        syntax_error("the template nests deeper than " + std::to_string(p.max_depth_) + " levels", p.cur().line);
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::Text: return "text";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::End: return "end of template";
      case Tok::String: return "string";
      case Tok::Int:
      case Tok::Float: return "number " + t.text;
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) syntax_error(std::string("expected '") + op + "', got " + describe(cur()), cur().line);
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) syntax_error("expected a name, got " + describe(cur()), cur().line);
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) syntax_error("expected end of statement block, got " + describe(cur()), cur().line);
    ++i_;
  }

  ExprPtr node(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Statements until a block tag whose keyword is in `stops` (returned, with the tag's '{%' and
  // keyword consumed), or the end of the template when `stops` is empty.
  std::string body(Body& out, const std::set<std::string>& stops) {
    DepthGuard g(*this);
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::End) {
        if (!stops.empty()) {
          std::string want;
          for (const auto& s : stops) want += (want.empty() ? "" : " or ") + ("'" + s + "'");
          syntax_error("unexpected end of template; expected " + want, t.line);
        }
        return "";
      }
      if (t.type == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->line = t.line;
        s->text = t.text;
        out.push_back(std::move(s));
        ++i_;
      } else if (t.type == Tok::VarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = t.line;
        s->expr = expression();
        if (cur().type != Tok::VarEnd) syntax_error("expected end of print statement, got " + describe(cur()), cur().line);
        ++i_;
        out.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        ++i_;
        if (cur().type != Tok::Name) syntax_error("expected a statement name, got " + describe(cur()), cur().line);
        const std::string kw = cur().text;
        if (stops.count(kw)) {
          ++i_;
          return kw;
        }
        out.push_back(statement());
      } else {
        syntax_error("unexpected " + describe(t), t.line);
      }
    }
  }

  std::unique_ptr<Stmt> statement() {
    const Token& t = cur();
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    const std::string kw = t.text;
    ++i_;
    if (kw == "if") {
      s->kind = Stmt::Kind::If;
      s->conds.push_back(expression());
      expect_block_end();
      s->bodies.emplace_back();
      for (;;) {
        const std::string end = body(s->bodies.back(), {"elif", "else", "endif"});
        if (end == "elif") {
          s->conds.push_back(expression());
          expect_block_end();
          s->bodies.emplace_back();
        } else if (end == "else") {
          expect_block_end();
          body(s->else_body, {"endif"});
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = Stmt::Kind::For;
      do {
        s->targets.push_back(expect_name());
      } while (accept_op(","));
      if (!accept_name("in")) syntax_error("expected 'in' in a for loop, got " + describe(cur()), cur().line);
      s->expr = or_expr(true);  // no ternary here: "if" filters the loop
      if (accept_name("if")) s->cond = expression();
      if (accept_name("recursive")) syntax_error("recursive for loops are not supported", t.line);
      expect_block_end();
      const std::string end = body(s->body, {"else", "endfor"});
      expect_block_end();
      if (end == "else") {
        body(s->else_body, {"endfor"});
        expect_block_end();
      }
    } else if (kw == "set") {
      s->kind = Stmt::Kind::Set;
      const std::string first = expect_name();
      if (accept_op(".")) {
        auto ns = node(Expr::Kind::Name, t.line);
        ns->name = first;
        s->expr = std::move(ns);
        s->text = expect_name();
      } else {
        s->targets.push_back(first);
        while (accept_op(",")) s->targets.push_back(expect_name());
      }
      if (accept_op("=")) {
        s->value = expression(true);
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || s->expr) syntax_error("a block set takes one name", t.line);
        if (accept_op("|")) s->cond = filter_chain(nullptr);
        expect_block_end();
        s->has_body = true;
        body(s->body, {"endset"});
        expect_block_end();
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->text = expect_name();
      params(s->params);
      expect_block_end();
      body(s->body, {"endmacro"});
      if (cur().type == Tok::Name) ++i_;  // {% endmacro name %}
      expect_block_end();
    } else if (kw == "call") {
      s->kind = Stmt::Kind::CallBlock;
      if (is_op("(")) params(s->params);
      s->expr = expression();
      if (s->expr->kind != Expr::Kind::Call) syntax_error("expected a call after {% call %}", t.line);
      expect_block_end();
      body(s->body, {"endcall"});
      expect_block_end();
    } else if (kw == "filter") {
      s->kind = Stmt::Kind::FilterBlock;
      s->expr = filter_chain(nullptr);
      expect_block_end();
      body(s->body, {"endfilter"});
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end();
    } else {
      syntax_error("unknown tag '" + kw + "'", t.line);
    }
    return s;
  }

  void params(std::vector<std::pair<std::string, ExprPtr>>& out) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!out.empty()) expect_op(",");
      if (accept_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (accept_op("=")) def = expression();
      out.emplace_back(std::move(name), std::move(def));
    }
  }

  // jinja2's parse_tuple: "a, b" is a tuple where a statement takes one (set x = a, b).
  ExprPtr expression(bool allow_tuple = false) {
    ExprPtr e = cond_expr();
    if (!allow_tuple || !is_op(",")) return e;
    auto list = node(Expr::Kind::List, e->line);
    list->args.push_back(std::move(e));
    while (accept_op(",")) {
      if (cur().type == Tok::BlockEnd) break;
      list->args.push_back(cond_expr());
    }
    return list;
  }

  ExprPtr cond_expr() {
    DepthGuard g(*this);
    ExprPtr e = or_expr(false);
    while (is_name("if")) {
      const int line = cur().line;
      ++i_;
      auto c = node(Expr::Kind::Cond, line);
      c->a = std::move(e);
      c->b = or_expr(false);
      if (accept_name("else")) c->c = cond_expr();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = node(Expr::Kind::Binary, line);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr or_expr(bool) {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = t_[i_++].line;
      e = binary("or", std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = t_[i_++].line;
      e = binary("and", std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    DepthGuard g(*this);
    if (is_name("not")) {
      auto e = node(Expr::Kind::Unary, t_[i_++].line);
      e->name = "not";
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      const int line = cur().line;
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = t_[i_++].text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), math1(), line);
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = t_[i_++];
      e = binary(t.text, std::move(e), concat(), t.line);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = t_[i_++].line;
      e = binary("~", std::move(e), math2(), line);
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = t_[i_++];
      e = binary(t.text, std::move(e), power(), t.line);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const int line = t_[i_++].line;
      e = binary("**", std::move(e), unary(true), line);
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::Unary, cur().line);
      e->name = t_[i_++].text;
      e->a = unary(false);
    } else {
      e = postfix(primary());
    }
    return with_filter ? filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    DepthGuard g(*this);
    const Token& t = cur();
    if (t.type == Tok::Name) {
      ++i_;
      if (t.text == "true" || t.text == "True") return literal(Value(true), t.line);
      if (t.text == "false" || t.text == "False") return literal(Value(false), t.line);
      if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
      auto e = node(Expr::Kind::Name, t.line);
      e->name = t.text;
      return e;
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += t_[i_++].text;  // adjacent literals join, as in Python
      return literal(Value(s), t.line);
    }
    if (t.type == Tok::Int) return ++i_, literal(Value(t.i), t.line);
    if (t.type == Tok::Float) return ++i_, literal(Value(t.f), t.line);
    if (accept_op("(")) {
      if (accept_op(")")) {  // ()
        auto e = node(Expr::Kind::List, t.line);
        e->name = "tuple";
        return e;
      }
      ExprPtr e = cond_expr();
      if (is_op(",")) {
        auto list = node(Expr::Kind::List, t.line);
        list->name = "tuple";
        list->args.push_back(std::move(e));
        while (accept_op(",") && !is_op(")")) list->args.push_back(cond_expr());
        e = std::move(list);
      }
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto e = node(Expr::Kind::List, t.line);
      while (!accept_op("]")) {
        if (!e->args.empty()) {
          expect_op(",");
          if (accept_op("]")) break;
        }
        e->args.push_back(cond_expr());
      }
      return e;
    }
    if (accept_op("{")) {
      auto e = node(Expr::Kind::Dict, t.line);
      while (!accept_op("}")) {
        if (!e->args.empty()) {
          expect_op(",");
          if (accept_op("}")) break;
        }
        e->args.push_back(cond_expr());
        expect_op(":");
        e->args.push_back(cond_expr());
      }
      return e;
    }
    syntax_error("unexpected " + describe(t), t.line);
  }

  ExprPtr literal(Value v, int line) {
    auto e = node(Expr::Kind::Literal, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (accept_op(".")) {
        auto a = node(Expr::Kind::Attr, line);
        a->a = std::move(e);
        if (cur().type == Tok::Int) {  // x.0 is x[0]
          a->kind = Expr::Kind::Item;
          a->b = literal(Value(t_[i_++].i), line);
        } else {
          a->name = expect_name();
        }
        e = std::move(a);
      } else if (accept_op("[")) {
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (is_op(":")) {
        slice = true;
        ++i_;
        if (++n > 2) syntax_error("a slice has at most three parts", line);
        continue;
      }
      if (is_op("]")) break;
      if (parts[n]) syntax_error("expected ']' or ':', got " + describe(cur()), cur().line);
      parts[n] = cond_expr();
    }
    expect_op("]");
    if (!slice) {
      if (!parts[0]) syntax_error("expected an index", line);
      auto e = node(Expr::Kind::Item, line);
      e->a = std::move(target);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = node(Expr::Kind::Slice, line);
    e->a = std::move(target);
    e->b = std::move(parts[0]);
    e->c = std::move(parts[1]);
    e->d = std::move(parts[2]);
    return e;
  }

  void call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!args.empty() || !kwargs.empty()) {
        expect_op(",");
        if (accept_op(")")) break;
      }
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string k = t_[i_].text;
        i_ += 2;
        kwargs.emplace_back(std::move(k), cond_expr());
      } else {
        if (!kwargs.empty()) syntax_error("a positional argument follows a keyword argument", cur().line);
        args.push_back(cond_expr());
      }
    }
  }

  ExprPtr call(ExprPtr callee) {
    auto e = node(Expr::Kind::Call, cur().line);
    e->a = std::move(callee);
    call_args(e->args, e->kwargs);
    return e;
  }

  ExprPtr filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        ++i_;
        e = filter_chain(std::move(e), true);
      } else if (is_name("is")) {
        e = test(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // "name(args)" after a '|' (already consumed); with `one`, a single filter, else a chain.
  ExprPtr filter_chain(ExprPtr input, bool one = false) {
    for (;;) {
      auto f = node(Expr::Kind::Filter, cur().line);
      f->name = expect_name();
      while (accept_op(".")) f->name += "." + expect_name();
      if (is_op("(")) call_args(f->args, f->kwargs);
      f->a = std::move(input);
      input = std::move(f);
      if (one || !accept_op("|")) return input;
    }
  }

  ExprPtr test(ExprPtr e) {
    auto t = node(Expr::Kind::Test, cur().line);
    ++i_;  // is
    t->negated = accept_name("not");
    t->name = expect_name();
    while (accept_op(".")) t->name += "." + expect_name();
    t->a = std::move(e);
    if (is_op("(")) {
      call_args(t->args, t->kwargs);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("[") || is_op("{")) &&
               !(is_name("else") || is_name("or") || is_name("and") || is_name("if") || is_name("is") || is_name("in") || is_name("not"))) {
      // "x is divisibleby 3", "x is sameas false": one argument without parentheses.
      t->args.push_back(postfix(primary()));
    }
    return t;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int max_depth_;
};

}  // namespace

Program parse(const std::vector<Token>& tokens, int max_depth) { return Parser(tokens, max_depth).program(); }

}  // namespace slake::jinja
