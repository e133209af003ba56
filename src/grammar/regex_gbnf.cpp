#include "regex_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "slake/error.h"
#include "slake/tokenizer/utf8.h"

namespace slake {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

// A character set: `ranges`, or everything but them.
struct CharSet {
  Ranges ranges;
  bool negated = false;
  bool contains(uint32_t c) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) in = in || (c >= lo && c <= hi);
    return in != negated;
  }
};

// The characters JSON writes escaped, with their escapes (the short ones, or \u00XX).
std::string json_escape(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      return buf;
    }
  }
}
// What this grammar writes escaped: JSON's must (quotes, backslashes, control characters) and DEL,
// which the string rule of every JSON grammar here takes only as \u007f.
bool json_escaped(uint32_t c) { return c == '"' || c == '\\' || c < 0x20 || c == 0x7F; }

std::string utf8(uint32_t c) {
  std::string s;
  append_utf8(s, c);
  return s;
}

// A GBNF string literal of raw text.
std::string literal(const std::string& text) {
  std::string s = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + "\"";
}

// One code point inside a GBNF character class.
std::string class_char(uint32_t c) {
  if (c == '\\' || c == ']' || c == '[' || c == '-' || c == '^' || c == '"') return std::string("\\") + static_cast<char>(c);
  if (c < 0x20 || c == 0x7F) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", c);
    return buf;
  }
  return utf8(c);
}

// The JSON text of one character of the set: unescaped where JSON writes it as it is, and the
// escape of each member JSON writes escaped.
std::string set_gbnf(const CharSet& set) {
  std::vector<std::string> alts;
  std::string cls;
  if (set.negated) {
    cls = "[^";
    for (const auto& [lo, hi] : set.ranges) cls += class_char(lo) + (hi > lo ? "-" + class_char(hi) : "");
    cls += "\"\\\\\\x00-\\x1F\\x7F]";
  } else {
    auto add = [&](uint32_t a, uint32_t b) {
      if (a <= b) cls += class_char(a) + (b > a ? "-" + class_char(b) : "");
    };
    for (const auto& [lo, hi] : set.ranges) {
      // The part of the range JSON writes as it is: below 0x20, '"', '\\' and 0x7F left out.
      uint32_t a = std::max<uint32_t>(lo, 0x20);
      for (const uint32_t cut : {0x22u, 0x5Cu, 0x7Fu})
        if (cut >= a && cut <= hi) {
          add(a, cut - 1);
          a = cut + 1;
        }
      add(a, hi);
    }
    if (!cls.empty()) cls = "[" + cls + "]";
  }
  if (!cls.empty()) alts.push_back(cls);
  for (uint32_t c = 0; c < 0x20; ++c)
    if (set.contains(c)) alts.push_back(literal(json_escape(c)));
  for (const uint32_t c : {0x22u, 0x5Cu, 0x7Fu})
    if (set.contains(c)) alts.push_back(literal(json_escape(c)));
  if (set.contains('/')) alts.push_back(literal("\\/"));  // JSON may escape '/' too
  if (alts.empty()) throw Error("JSON schema: a pattern's class matches no character");
  if (alts.size() == 1) return alts[0];
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "(" : " | ") + a;
  return out + ")";
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

class Parser {
 public:
  explicit Parser(const std::string& p) : src_(p) {
    for (size_t i = 0; i < p.size();) {
      const size_t len = utf8_sequence_length(p, i);
      if (len == 0) refuse("is not valid UTF-8");
      cps_.push_back(utf8_decode(p, i, len));
      i += len;
    }
  }

  std::string top() {
    // Top-level branches carry their own anchors: without `^` anything may come before, without
    // `$` anything after.
    std::vector<std::string> branches;
    do {
      const bool start = eat('^');
      bool empty = false;
      std::string body = seq(true, empty);
      const bool end = eat('$');
      if (more() && !peek('|')) refuse(peek(')') ? "has an unmatched ')'" : "has '$' before its end");
      branches.push_back((start ? "" : "char* ") + body + (end ? "" : " char*"));
    } while (eat('|'));
    if (at_ != cps_.size()) refuse("has an unmatched ')'");
    if (branches.size() == 1) return "(" + branches[0] + ")";
    std::string out;
    for (const std::string& b : branches) out += (out.empty() ? "((" : ") | (") + b;
    return out + "))";
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const { fail("JSON schema: the pattern '" + src_ + "' " + what); }
  bool more() const { return at_ < cps_.size(); }
  bool peek(uint32_t c) const { return more() && cps_[at_] == c; }
  bool eat(uint32_t c) {
    if (!peek(c)) return false;
    ++at_;
    return true;
  }

  // `empty`: whether the expression can match the empty string (a repeat of one without end is
  // refused: the grammar it would give recurses without consuming anything).
  std::string alt(bool& empty) {
    std::string out = seq(false, empty);
    if (!peek('|')) return out;
    out = "(" + out;
    while (eat('|')) {
      bool e = false;
      out += " | " + seq(false, e);
      empty = empty || e;
    }
    return out + ")";
  }

  // Atoms with their quantifiers, up to '|', ')' or the end (or a final '$' at the top level).
  std::string seq(bool top_level, bool& empty) {
    std::string out;
    empty = true;
    while (more() && !peek('|') && !peek(')')) {
      if (peek('$') && top_level && (at_ + 1 == cps_.size() || cps_[at_ + 1] == '|')) break;
      bool e = false;
      std::string a = atom(e);
      a = quantified(a, e);
      empty = empty && e;
      out += (out.empty() ? "" : " ") + a;
    }
    return out.empty() ? "\"\"" : out;
  }

  // The atom `a` with the quantifier that follows, if any; `empty` says on entry whether the atom
  // can match nothing, and on return whether the quantified atom can.
  std::string quantified(const std::string& a, bool& empty) {
    const bool atom_empty = empty;
    std::string q;
    bool unbounded = false;
    if (eat('*')) {
      q = "*", unbounded = true, empty = true;
    } else if (eat('+')) {
      q = "+", unbounded = true;
    } else if (eat('?')) {
      q = "?", empty = true;
    } else if (peek('{')) {
      const size_t back = at_;
      ++at_;
      const long lo = number();
      long hi = lo;
      if (eat(',')) hi = peek('}') ? -1 : number();
      if (lo < 0 || !eat('}')) {  // not a quantifier: ECMAScript reads the brace as itself
        at_ = back;
        return a;
      }
      if (lo > 1000 || hi > 1000 || (hi >= 0 && hi < lo)) refuse("has a repetition {m,n} outside 0 <= m <= n <= 1000");
      q = "{" + std::to_string(lo) + (hi == lo ? "" : "," + (hi < 0 ? std::string() : std::to_string(hi))) + "}";
      unbounded = hi < 0;
      empty = empty || lo == 0;
    } else {
      return a;
    }
    if (unbounded && atom_empty) refuse("repeats without end something that can match nothing (as in (a*)*)");
    eat('?');  // a lazy quantifier matches the same strings
    if (peek('*') || peek('+') || peek('?') || peek('{')) refuse("has a quantifier after a quantifier");
    return "(" + a + ")" + q;
  }

  long number() {
    long n = -1;
    while (more() && cps_[at_] >= '0' && cps_[at_] <= '9') {
      n = (n < 0 ? 0 : n * 10) + static_cast<long>(cps_[at_++] - '0');
      if (n > 100000) refuse("has a repetition count too large");
    }
    return n;
  }

  // One atom; `empty`: whether it can match nothing (only a group can).
  std::string atom(bool& empty) {
    empty = false;
    const uint32_t c = cps_[at_++];
    switch (c) {
      case '(': {
        if (eat('?')) {
          if (!eat(':')) refuse("uses lookaround or named groups, which a grammar cannot express");
        }
        if (++depth_ > kMaxDepth) refuse("nests groups more than " + std::to_string(kMaxDepth) + " deep");
        const std::string inner = alt(empty);
        --depth_;
        if (!eat(')')) refuse("has an unclosed '('");
        return "(" + inner + ")";
      }
      case '[': return set_gbnf(char_class());
      case '.': return set_gbnf(CharSet{{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true});
      case '\\': return escape_atom();
      case '^': refuse("has '^' after its start");
      case '$': refuse("has '$' before its end");
      case '*': case '+': case '?': refuse("has a quantifier with nothing to repeat");
      case ')': refuse("has an unmatched ')'");
      default: return json_escaped(c) ? literal(json_escape(c)) : literal(utf8(c));
    }
  }

  // After a backslash, outside a class.
  std::string escape_atom() {
    if (!more()) refuse("ends with a lone backslash");
    const uint32_t c = cps_[at_];
    if (c == 'd' || c == 'w' || c == 's' || c == 'D' || c == 'W' || c == 'S') {
      ++at_;
      return set_gbnf(CharSet{class_ranges(c), c < 'a'});
    }
    const uint32_t cp = escaped_char();
    return json_escaped(cp) ? literal(json_escape(cp)) : literal(utf8(cp));
  }

  static Ranges class_ranges(uint32_t c) {
    const uint32_t lower = c | 0x20;
    return lower == 'd' ? kDigit : lower == 'w' ? kWord : kSpace;
  }

  // The character a backslash escape stands for (the backslash read already).
  uint32_t escaped_char() {
    const uint32_t c = cps_[at_++];
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'b': case 'B': refuse("uses a word boundary (\\b), which a grammar cannot express");
      case 'c': case 'k': case 'p': case 'P': refuse(std::string("uses the escape \\") + static_cast<char>(c) + ", which is not supported");
      default:
        if (c >= '1' && c <= '9') refuse("uses a backreference, which a grammar cannot express");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) refuse(std::string("uses the unknown escape \\") + static_cast<char>(c));
        return c;  // escaped punctuation stands for itself
    }
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (!more()) refuse("has a short hex escape");
      const uint32_t h = cps_[at_++];
      const int d = h >= '0' && h <= '9' ? static_cast<int>(h - '0') : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? static_cast<int>((h | 0x20) - 'a' + 10) : -1;
      if (d < 0) refuse("has a bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After '[': members up to ']'.
  CharSet char_class() {
    CharSet set;
    set.negated = eat('^');
    while (true) {
      if (!more()) refuse("has an unclosed '['");
      if (eat(']')) break;
      uint32_t lo;
      if (eat('\\')) {
        if (!more()) refuse("ends with a lone backslash");
        const uint32_t c = cps_[at_];
        if (c == 'd' || c == 'w' || c == 's') {
          ++at_;
          const Ranges r = class_ranges(c);
          set.ranges.insert(set.ranges.end(), r.begin(), r.end());
          continue;
        }
        if (c == 'D' || c == 'W' || c == 'S') refuse("uses \\D, \\W or \\S inside a class, which is not supported");
        if (c == 'b') {
          ++at_;
          lo = '\b';  // inside a class, \b is the backspace
        } else {
          lo = escaped_char();
        }
      } else {
        lo = cps_[at_++];
      }
      uint32_t hi = lo;
      if (peek('-') && at_ + 1 < cps_.size() && cps_[at_ + 1] != ']') {
        ++at_;
        if (eat('\\')) {
          if (!more()) refuse("ends with a lone backslash");
          hi = cps_[at_] == 'b' ? (++at_, '\b') : escaped_char();
        } else {
          hi = cps_[at_++];
        }
        if (hi < lo) refuse("has a class range out of order");
      }
      set.ranges.emplace_back(lo, hi);
    }
    return set;
  }

  static constexpr int kMaxDepth = 24;  // each group is two or three levels of the GBNF parser's 64
  std::string src_;
  std::vector<uint32_t> cps_;
  size_t at_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string regex_to_gbnf(const std::string& pattern) { return Parser(pattern).top(); }

}  // namespace slake
