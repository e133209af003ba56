// Template source to tokens, as jinja2's lexer with transformers' settings (trim_blocks,
// lstrip_blocks, no trailing newline kept): text runs, tag delimiters, and the expression tokens
// inside tags. Whitespace control ("{%-", "-%}", "{%+", ...) is applied here, to the text runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace slake::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type;
  std::string text;  // Text: the text; Name/Op: the spelling; String: the decoded value
  int line;
  int64_t i = 0;
  double f = 0;
};

// Throws RenderError (with the line) on an unterminated tag, comment or string, or a character
// that starts no token.
std::vector<Token> lex(const std::string& source);

}  // namespace slake::jinja
