// UTF-8 and GPT-2 byte-alphabet helpers shared by the tokenizers and token_to_piece.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "slake/tokenizer/utf8.h"

namespace slake::detail {

using slake::append_utf8;
using slake::utf8_decode;
using slake::utf8_sequence_length;

// How many bytes at the end of `s` (0 to 3) begin a well-formed UTF-8 sequence that more bytes could
// still complete. Bytes that can never become valid are not counted.
size_t utf8_incomplete_tail(std::string_view s);


// GPT-2's bytes_to_unicode: every byte as a printable character, so that byte-level BPE tokens are
// text. Printable ASCII and Latin-1 map to themselves; the other 68 bytes to U+0100 and up.
const std::string& byte_to_gpt2_char(uint8_t b);
// The inverse: the byte that a character of that alphabet stands for, or -1.
int gpt2_char_to_byte(uint32_t cp);

}  // namespace slake::detail
