#include "slake/vocab.h"

#include <array>

namespace slake {

namespace {

// Inverse of GPT-2's bytes_to_unicode: code point -> byte (or -1).
const std::array<int, 512>& gpt2_unicode_to_byte() {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t{};
    t.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      if (printable) t[static_cast<size_t>(b)] = b;
      else t[static_cast<size_t>(256 + n++)] = b;
    }
    return t;
  }();
  return table;
}

std::string decode_gpt2(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const unsigned char c = static_cast<unsigned char>(piece[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) { cp = c; len = 1; }
    else if ((c >> 5) == 6 && i + 1 < piece.size()) { cp = ((c & 0x1F) << 6) | (piece[i + 1] & 0x3F); len = 2; }
    else { out += piece.substr(i); break; }
    const int b = cp < 512 ? gpt2_unicode_to_byte()[cp] : -1;
    if (b >= 0) out += static_cast<char>(b);
    else out += piece.substr(i, len);
    i += len;
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string token_to_piece(const Vocab& v, int token) {
  if (token < 0 || static_cast<size_t>(token) >= v.tokens.size()) return "";
  const std::string& p = v.tokens[static_cast<size_t>(token)];
  const int type = v.types.empty() ? 1 : v.types[static_cast<size_t>(token)];
  if (type == 3 || type == 5) return "";  // control / unused
  if (v.model == "gpt2") return type == 4 ? p : decode_gpt2(p);
  if (type == 6 && p.size() == 6 && hex_digit(p[3]) >= 0 && hex_digit(p[4]) >= 0)
    return std::string(1, static_cast<char>(hex_digit(p[3]) * 16 + hex_digit(p[4])));
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (i + 2 < p.size() && static_cast<unsigned char>(p[i]) == 0xE2 && static_cast<unsigned char>(p[i + 1]) == 0x96 &&
        static_cast<unsigned char>(p[i + 2]) == 0x81) {
      out += ' ';
      i += 2;
    } else {
      out += p[i];
    }
  }
  return out;
}

}  // namespace slake
