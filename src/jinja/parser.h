// Tokens to a Program, with jinja2's grammar and operator precedence.
#pragma once
#include <vector>

#include "ast.h"
#include "lexer.h"

namespace slake::jinja {

// Throws RenderError (with the line) on a syntax error, an unknown tag or nesting deeper than
// `max_depth` (brackets, operators or blocks).
Program parse(const std::vector<Token>& tokens, int max_depth);

}  // namespace slake::jinja
