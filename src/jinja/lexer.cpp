// jinja2's lexer rules, read from its lexer.py: "{%-" strips all whitespace before the tag and
// "-%}" all after it; otherwise lstrip_blocks strips spaces and tabs between the start of a line
// and a block or comment tag ("{%+" opts out), and trim_blocks drops one newline after a block or
// comment tag ("+%}" opts out). Inside a tag, "}}" and "%}" only end it when brackets balance.
#include "lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "slake/tokenizer/utf8.h"
#include "value.h"

namespace slake::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] void syntax_error(const std::string& msg, int line) { throw RenderError{msg, line}; }

// A string literal's body with Python's escapes decoded (jinja2 reads literals with
// "unicode-escape"); an unknown escape stays as written, as Python leaves it.
std::string decode_string(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    int hex_len = 0;
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // a line continuation
      case 'x': hex_len = 2; break;
      case 'u': hex_len = 4; break;
      case 'U': hex_len = 8; break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k) v = v * 8 + (body[i + k] - '0');
          i += k - 1;
          append_utf8(out, v);
        } else {
          out += '\\';
          out += c;
        }
    }
    if (hex_len) {
      if (i + static_cast<size_t>(hex_len) >= body.size())
        syntax_error("truncated \\" + std::string(1, c) + " escape in a string", line);
      uint32_t v = 0;
      for (int k = 1; k <= hex_len; ++k) {
        const char h = body[i + static_cast<size_t>(k)];
        if (!std::isxdigit(static_cast<unsigned char>(h))) syntax_error("bad \\" + std::string(1, c) + " escape in a string", line);
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (v > 0x10FFFF) syntax_error("bad \\U escape in a string", line);
      append_utf8(out, v);
      i += static_cast<size_t>(hex_len);
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the last tag ended with a newline (or nothing came before)
    while (pos_ < s_.size()) {
      size_t open = pos_;
      for (;;) {
        open = s_.find('{', open);
        if (open == std::string::npos || open + 1 >= s_.size()) break;
        const char n = s_[open + 1];
        if (n == '{' || n == '%' || n == '#') break;
        ++open;
      }
      if (open == std::string::npos || open + 1 >= s_.size()) {
        text(s_.substr(pos_));
        advance_to(s_.size());
        break;
      }
      std::string txt = s_.substr(pos_, open - pos_);
      const char kind = s_[open + 1];
      const char sign = open + 2 < s_.size() ? s_[open + 2] : 0;
      if (sign == '-') {
        size_t e = txt.size();
        while (e > 0 && is_space(txt[e - 1])) --e;
        txt.resize(e);
      } else if (sign != '+' && kind != '{') {
        const size_t lpos = txt.rfind('\n') == std::string::npos ? 0 : txt.rfind('\n') + 1;
        if (lpos > 0 || line_starting) {
          bool blank = lpos < txt.size();
          for (size_t k = lpos; k < txt.size(); ++k) blank = blank && is_space(txt[k]);
          if (blank) txt.resize(lpos);
        }
      }
      text(txt);
      advance_to(open + 2 + ((sign == '-' || sign == '+') ? 1 : 0));
      if (kind == '#') comment();
      else tag(kind == '{');
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    out_.push_back({Tok::End, "", line_});
    return std::move(out_);
  }

 private:
  void advance_to(size_t p) {
    for (size_t k = pos_; k < p && k < s_.size(); ++k) line_ += s_[k] == '\n';
    pos_ = p;
  }

  void text(const std::string& t) {
    if (!t.empty()) out_.push_back({Tok::Text, t, line_});
  }

  // After a block or comment end: "-" strips all following whitespace, "+" nothing, else one newline.
  void after_block_end(char sign) {
    if (sign == '-') {
      size_t e = pos_;
      while (e < s_.size() && is_space(s_[e])) ++e;
      advance_to(e);
    } else if (sign != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
  }

  void comment() {
    const int start = line_;
    const size_t close = s_.find("#}", pos_);
    if (close == std::string::npos) syntax_error("unterminated comment", start);
    const char sign = close > pos_ && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : 0;
    advance_to(close + 2);
    after_block_end(sign);
  }

  void tag(bool is_var) {
    const int start = line_;
    out_.push_back({is_var ? Tok::VarBegin : Tok::BlockBegin, "", line_});
    int depth = 0;
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= s_.size()) syntax_error(is_var ? "unterminated '{{'" : "unterminated '{%'", start);
      const char c = s_[pos_];
      if (depth == 0) {
        const char* end = is_var ? "}}" : "%}";
        char sign = 0;
        size_t len = 0;
        if (s_.compare(pos_, 2, end) == 0) len = 2;
        else if ((c == '-' || (!is_var && c == '+')) && s_.compare(pos_ + 1, 2, end) == 0) sign = c, len = 3;
        if (len) {
          out_.push_back({is_var ? Tok::VarEnd : Tok::BlockEnd, "", line_});
          advance_to(pos_ + len);
          if (is_var) {
            if (sign == '-') after_block_end('-');
          } else {
            after_block_end(sign);
          }
          return;
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        out_.push_back({Tok::Name, s_.substr(pos_, e - pos_), line_});
        advance_to(e);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
        if (e >= s_.size()) syntax_error("unterminated string", line_);
        out_.push_back({Tok::String, decode_string(s_.substr(pos_ + 1, e - pos_ - 1), line_), line_});
        advance_to(e + 1);
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                          ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}", ";"};
        const char* op = nullptr;
        for (const char* o : ops)
          if (s_.compare(pos_, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (!op) syntax_error(std::string("unexpected character '") + c + "'", line_);
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if ((*op == ')' || *op == ']' || *op == '}') && depth > 0) --depth;
        out_.push_back({Tok::Op, op, line_});
        advance_to(pos_ + std::strlen(op));
      }
    }
  }

  void number() {
    size_t e = pos_;
    auto digits = [&] {
      while (e < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[e])) ||
                               (s_[e] == '_' && e + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e + 1])))))
        ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        e = k;
        digits();
        is_float = true;
      }
    }
    std::string t;
    for (size_t k = pos_; k < e; ++k)
      if (s_[k] != '_') t += s_[k];
    Token tok{is_float ? Tok::Float : Tok::Int, t, line_};
    if (is_float) {
      tok.f = std::strtod(t.c_str(), nullptr);
    } else {
      errno = 0;
      tok.i = std::strtoll(t.c_str(), nullptr, 10);
      if (errno == ERANGE) syntax_error("integer literal " + t + " is too large", line_);
    }
    out_.push_back(tok);
    advance_to(e);
  }

  const std::string& s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) {
  // jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(src).run();
}

}  // namespace slake::jinja
