// UTF-8 helpers for every part that reads or writes text by code point: the tokenizers, the
// Jinja lexer, the grammar converters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace slake {

// Length (1 to 4) of the well-formed UTF-8 sequence that starts at s[pos], or 0 when the bytes
// there are not one: a stray continuation byte, an overlong form, a surrogate, a code point above
// U+10FFFF, or a sequence cut short. (The Unicode standard's table 3-7.)
size_t utf8_sequence_length(std::string_view s, size_t pos);
// The code point of the well-formed sequence of `len` bytes at s[pos].
uint32_t utf8_decode(std::string_view s, size_t pos, size_t len);
// Appends code point `cp` (at most U+10FFFF) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace slake
