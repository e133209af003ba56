#include "slake/tokenizer/vocab.h"

#include "unicode_util.h"

namespace slake {

namespace {

// Byte-level BPE: every character of a piece stands for one byte (GPT-2's alphabet). Characters
// outside that alphabet, and bytes that are not UTF-8, are copied as they are.
std::string decode_byte_level(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const size_t len = detail::utf8_sequence_length(piece, i);
    if (len == 0) {
      out += piece[i++];
      continue;
    }
    const int b = detail::gpt2_char_to_byte(detail::utf8_decode(piece, i, len));
    if (b >= 0) out += static_cast<char>(b);
    else out.append(piece, i, len);
    i += len;
  }
  return out;
}

// SentencePiece writes spaces as U+2581.
std::string unescape_spaces(const std::string& piece) {
  static const std::string marker = "\xE2\x96\x81";
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, marker.size(), marker) == 0) {
      out += ' ';
      i += marker.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xNN>" piece, or -1.
int byte_piece_value(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  const int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::string token_to_piece(const Vocab& v, int token, bool special) {
  if (token < 0 || static_cast<size_t>(token) >= v.tokens.size()) return "";
  const size_t id = static_cast<size_t>(token);
  const std::string& p = v.tokens[id];
  const int type = id < v.types.size() ? v.types[id] : 1;
  switch (type) {
    case 2:  // unknown
    case 3:  // control
      return special ? p : "";
    case 4:  // user-defined: the text as written
      return p;
    case 5:  // unused
      return "";
    case 6:  // byte
      if (const int b = byte_piece_value(p); b >= 0) return std::string(1, static_cast<char>(b));
      break;
    default:
      break;
  }
  return v.model == "gpt2" ? decode_byte_level(p) : unescape_spaces(p);
}

}  // namespace slake
