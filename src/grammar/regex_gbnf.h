// A JSON Schema `pattern` (an ECMAScript regular expression) as GBNF over the JSON text of the
// string's content: what goes between the quotes, with the escapes JSON requires (`"` as `\"`,
// a newline as `\n`). Used by json_schema_to_gbnf.
#pragma once
#include <string>

namespace slake {

// The GBNF expression whose matches are the JSON-escaped texts of exactly the strings the pattern
// finds a match in (JSON Schema patterns are not anchored: without `^` any text may come first,
// without `$` any text may follow). Supported: literals and escapes (\d \w \s \D \W \S, escaped
// punctuation, \n \t \r \f \v, \uXXXX), `.`, classes with ranges and negation, groups `( )` and
// `(?: )`, alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy forms too), `^` at the start
// and `$` at the end. Anything else (backreferences, lookaround, \b, anchors elsewhere) throws
// slake::Error naming it. Strings are matched without JSON's \u escapes.
std::string regex_to_gbnf(const std::string& pattern);

}  // namespace slake
