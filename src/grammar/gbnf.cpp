// GBNF text -> Grammar: a recursive-descent parser, then the checks (defined rules, no left
// recursion, every rule productive).
#include <algorithm>
#include <map>

#include "slake/error.h"
#include "slake/grammar/grammar.h"

namespace slake {

namespace {

using Element = Grammar::Element;

class Parser {
 public:
  Parser(std::string_view src, const GrammarLimits& limits, Grammar& g) : src_(src), limits_(limits), g_(g) {}

  void parse_all() {
    skip_space(true);
    while (pos_ < src_.size()) {
      const size_t at = pos_;
      const std::string name = parse_name();
      skip_space(false);
      if (src_.substr(pos_, 3) != "::=") error("expected '::=' after the rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const uint32_t id = rule_id(name);
      if (defined_[id]) error_at(at, "rule '" + name + "' is defined twice");
      defined_[id] = true;
      body_[id] = parse_alternates(0);
      if (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r')
        error("unexpected '" + std::string(1, src_[pos_]) + "'");
      skip_space(true);
    }
  }

  // Lays the rules' alternatives out as Grammar::elements.
  void finish() {
    for (uint32_t id = 0; id < names_.size(); ++id)
      if (!defined_[id]) error_at(used_at_[id], "rule '" + names_[id] + "' is used but not defined");
    g_.rule_names = names_;
    g_.rules.assign(names_.size(), {});
    for (uint32_t id = 0; id < names_.size(); ++id) {
      for (const auto& alt : body_[id]) {
        g_.rules[id].push_back(static_cast<uint32_t>(g_.elements.size()));
        g_.elements.insert(g_.elements.end(), alt.begin(), alt.end());
        g_.elements.push_back({Element::kEnd, 0});
        if (g_.elements.size() > limits_.max_elements)
          fail("grammar: more than " + std::to_string(limits_.max_elements) + " elements");
      }
    }
  }

  uint32_t find_rule(const std::string& name) const {
    const auto it = ids_.find(name);
    return it == ids_.end() ? UINT32_MAX : it->second;
  }

 private:
  using Seq = std::vector<Element>;
  using Alts = std::vector<Seq>;

  [[noreturn]] void error_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    fail("grammar: " + what + " at " + std::to_string(line) + ":" + std::to_string(col));
  }
  [[noreturn]] void error(const std::string& what) const { error_at(pos_, what); }

  // Spaces and comments; newlines only where `newlines`.
  void skip_space(bool newlines) {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < src_.size() && name_char(src_[pos_])) ++pos_;
    if (pos_ == start) error("expected a rule name");
    return std::string(src_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name) {
    const auto [it, added] = ids_.emplace(name, static_cast<uint32_t>(names_.size()));
    if (added) {
      names_.push_back(name);
      defined_.push_back(false);
      body_.emplace_back();
      used_at_.push_back(pos_);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base) {
    std::string name;
    do name = base + "-" + std::to_string(++helpers_);
    while (ids_.count(name));
    const uint32_t id = rule_id(name);
    defined_[id] = true;
    return id;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (pos_ >= src_.size()) error("unfinished escape");
      const char c = src_[pos_];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("bad hex digit in an escape");
    }
    if (v > 0x10FFFF) error("code point beyond U+10FFFF");
    return v;
  }

  // One character of a literal or a class: an escape, or a UTF-8 sequence.
  uint32_t parse_char() {
    if (pos_ >= src_.size()) error("unexpected end of the grammar");
    const unsigned char c = static_cast<unsigned char>(src_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= src_.size()) error("unfinished escape");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return static_cast<uint32_t>(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: error_at(pos_ - 2, std::string("unknown escape '\\") + e + "'");
      }
    }
    const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > src_.size()) error("invalid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
    for (int i = 1; i < len; ++i) {
      const unsigned char b = static_cast<unsigned char>(src_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  Element chars(Grammar::CharSet set) {
    g_.sets.push_back(std::move(set));
    return {Element::kChars, static_cast<uint32_t>(g_.sets.size() - 1)};
  }

  Alts parse_alternates(int depth) {
    if (depth > limits_.max_nesting) error("parentheses nested deeper than " + std::to_string(limits_.max_nesting));
    Alts alts;
    alts.push_back(parse_sequence(depth));
    while (pos_ < src_.size() && src_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(depth));
    }
    return alts;
  }

  Seq parse_sequence(int depth) {
    Seq seq;
    size_t last_start = 0;  // where the last element (the one a postfix operator takes) starts in seq
    const bool nested = depth > 0;
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      const size_t start = seq.size();
      if (c == '"') {
        ++pos_;
        while (pos_ < src_.size() && src_[pos_] != '"') {
          const uint32_t ch = parse_char();
          seq.push_back(chars({{{ch, ch}}, false}));
        }
        if (pos_ >= src_.size()) error("unfinished literal");
        ++pos_;
        // A literal is one element for the postfix operators: wrap a multi-character one.
        if (seq.size() - start != 1) wrap(seq, start);
      } else if (c == '[') {
        ++pos_;
        Grammar::CharSet set;
        if (pos_ < src_.size() && src_[pos_] == '^') set.negated = true, ++pos_;
        while (pos_ < src_.size() && src_[pos_] != ']') {
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) error("a class range runs backwards");
          }
          set.ranges.emplace_back(lo, hi);
        }
        if (pos_ >= src_.size()) error("unfinished character class");
        ++pos_;
        seq.push_back(chars(std::move(set)));
      } else if (c == '.') {
        ++pos_;
        seq.push_back(chars({{{0, 0x10FFFF}}, false}));
      } else if (name_char(c)) {
        const std::string name = parse_name();
        seq.push_back({Element::kRef, rule_id(name)});
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        Alts inner = parse_alternates(depth + 1);
        if (pos_ >= src_.size() || src_[pos_] != ')') error("expected ')'");
        ++pos_;
        const uint32_t id = new_rule("group");
        body_[id] = std::move(inner);
        seq.push_back({Element::kRef, id});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.empty()) error(std::string("'") + c + "' with nothing before it");
        repeat(seq, last_start);
        skip_space(nested);
        continue;
      } else {
        break;
      }
      last_start = start;
      skip_space(nested);
    }
    return seq;
  }

  // Replaces seq[start..] by a reference to a new rule that is that sequence.
  void wrap(Seq& seq, size_t start) {
    const uint32_t id = new_rule("lit");
    body_[id] = {Seq(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end())};
    seq.resize(start);
    seq.push_back({Element::kRef, id});
  }

  int parse_int() {
    const size_t start = pos_;
    long v = 0;
    while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') {
      v = v * 10 + (src_[pos_++] - '0');
      if (v > 100000) error("a repetition count above 100000");
    }
    if (pos_ == start) error("expected a number");
    return static_cast<int>(v);
  }

  // A postfix operator on the element at seq[last].
  void repeat(Seq& seq, size_t last) {
    const Element x = seq[last];
    seq.resize(last);
    int lo = 0, hi = -1;  // hi -1: unbounded
    const char op = src_[pos_++];
    if (op == '*') lo = 0, hi = -1;
    else if (op == '+') lo = 1, hi = -1;
    else if (op == '?') lo = 0, hi = 1;
    else {
      skip_space(false);
      lo = parse_int();
      skip_space(false);
      hi = lo;
      if (pos_ < src_.size() && src_[pos_] == ',') {
        ++pos_;
        skip_space(false);
        hi = pos_ < src_.size() && src_[pos_] == '}' ? -1 : parse_int();
        skip_space(false);
      }
      if (pos_ >= src_.size() || src_[pos_] != '}') error("expected '}'");
      ++pos_;
      if (hi >= 0 && hi < lo) error("a repetition {m,n} with n < m");
    }
    // Every element a repetition makes counts against the limit, before it is made.
    made_ += 2 * (static_cast<size_t>(lo) + (hi < 0 ? 2 : static_cast<size_t>(hi)));
    if (made_ + seq.size() > limits_.max_elements) error("repetitions past the grammar's size limit");
    for (int i = 0; i < lo; ++i) seq.push_back(x);
    if (hi < 0) {  // r ::= x r | ""
      const uint32_t r = new_rule("star");
      body_[r] = {{x, {Element::kRef, r}}, {}};
      seq.push_back({Element::kRef, r});
    } else if (hi > lo) {  // (x (x (...)?)?)? : nested optionals, n - m deep
      uint32_t inner = UINT32_MAX;
      for (int i = 0; i < hi - lo; ++i) {
        const uint32_t r = new_rule("opt");
        Seq once = {x};
        if (inner != UINT32_MAX) once.push_back({Element::kRef, inner});
        body_[r] = {once, {}};
        inner = r;
      }
      seq.push_back({Element::kRef, inner});
    }
  }

  std::string_view src_;
  const GrammarLimits& limits_;
  Grammar& g_;
  size_t pos_ = 0;
  int helpers_ = 0;
  size_t made_ = 0;  // elements the repetitions have made so far
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<Alts> body_;
  std::vector<size_t> used_at_;
};

// Which rules can match the empty string, and which can match anything at all.
void check(const Grammar& g) {
  const size_t n = g.rules.size();
  std::vector<bool> nullable(n, false), productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const uint32_t start : g.rules[r]) {
        bool all_null = true, all_prod = true;
        for (uint32_t p = start; g.elements[p].kind != Element::kEnd; ++p) {
          const Element& e = g.elements[p];
          const bool null = e.kind == Element::kRef && nullable[e.value];
          const bool prod = e.kind == Element::kChars || productive[e.value];
          all_null = all_null && null;
          all_prod = all_prod && prod;
        }
        if (all_null && !nullable[r]) nullable[r] = changed = true;
        if (all_prod && !productive[r]) productive[r] = changed = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r)
    if (!productive[r]) fail("grammar: rule '" + g.rule_names[r] + "' cannot match anything (it never ends)");
  // Left recursion: a rule that can reach itself without consuming a character.
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const uint32_t start : g.rules[r])
      for (uint32_t p = start; g.elements[p].kind == Element::kRef; ++p) {
        left[r].push_back(g.elements[p].value);
        if (!nullable[g.elements[p].value]) break;
      }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    path.push_back({s, 0});
    color[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = left[r][i++];
      if (color[next] == 1) fail("grammar: rule '" + g.rule_names[next] + "' is left-recursive");
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

}  // namespace

bool Grammar::CharSet::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
  return in != negated;
}

bool Grammar::CharSet::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Some code point of [lo, hi] outside every range: walk the ranges in order.
  std::vector<std::pair<uint32_t, uint32_t>> r = ranges;
  std::sort(r.begin(), r.end());
  uint32_t cur = lo;
  for (const auto& [a, b] : r) {
    if (b < cur) continue;
    if (a > cur) return true;
    if (b >= hi) return false;
    cur = b + 1;
  }
  return cur <= hi;
}

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, const std::string& root, const GrammarLimits& limits) {
  if (gbnf.size() > limits.max_text_bytes)
    fail("grammar: " + std::to_string(gbnf.size()) + " bytes, more than the limit of " + std::to_string(limits.max_text_bytes));
  auto g = std::make_shared<Grammar>();
  g->limits = limits;
  Parser p(gbnf, limits, *g);
  p.parse_all();
  p.finish();
  const uint32_t r = p.find_rule(root);
  if (r == UINT32_MAX) fail("grammar: no rule '" + root + "'");
  g->root = r;
  check(*g);
  return g;
}

}  // namespace slake
