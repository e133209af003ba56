// UTF-8 and GPT-2 byte-alphabet helpers shared by the tokenizers and token_to_piece.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace slake::detail {

// Length (1 to 4) of the well-formed UTF-8 sequence that starts at s[pos], or 0 when the bytes
// there are not one: a stray continuation byte, an overlong form, a surrogate, a code point above
// U+10FFFF, or a sequence cut short. (The Unicode standard's table 3-7.)
size_t utf8_sequence_length(std::string_view s, size_t pos);

// How many bytes at the end of `s` (0 to 3) begin a well-formed UTF-8 sequence that more bytes could
// still complete. Bytes that can never become valid are not counted.
size_t utf8_incomplete_tail(std::string_view s);

// The code point of the well-formed sequence of `len` bytes at s[pos].
uint32_t utf8_decode(std::string_view s, size_t pos, size_t len);
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's bytes_to_unicode: every byte as a printable character, so that byte-level BPE tokens are
// text. Printable ASCII and Latin-1 map to themselves; the other 68 bytes to U+0100 and up.
const std::string& byte_to_gpt2_char(uint8_t b);
// The inverse: the byte that a character of that alphabet stands for, or -1.
int gpt2_char_to_byte(uint32_t cp);

}  // namespace slake::detail
