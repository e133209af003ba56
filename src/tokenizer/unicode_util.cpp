#include "unicode_util.h"

#include <array>

namespace slake::detail {

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// The sequence length a lead byte announces and the range its second byte must lie in (the
// narrower ranges exclude overlong forms, surrogates and code points above U+10FFFF).
struct LeadRule {
  size_t length;  // 0: not a lead byte
  unsigned char second_min, second_max;
};

LeadRule lead_rule(unsigned char c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Whether s[pos..pos+n) can be the first n bytes of a well-formed sequence of rule.length bytes.
bool valid_prefix(std::string_view s, size_t pos, size_t n, const LeadRule& rule) {
  for (size_t k = 1; k < n; ++k) {
    const unsigned char c = static_cast<unsigned char>(s[pos + k]);
    if (k == 1 ? (c < rule.second_min || c > rule.second_max) : !is_continuation(c)) return false;
  }
  return true;
}

struct Gpt2Alphabet {
  std::array<std::string, 256> char_of_byte;
  std::array<int, 324> byte_of_char;  // code points below 256 + 68
};

const Gpt2Alphabet& gpt2_alphabet() {
  static const Gpt2Alphabet alphabet = [] {
    Gpt2Alphabet a;
    a.byte_of_char.fill(-1);
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next_extra++;
      append_utf8(a.char_of_byte[static_cast<size_t>(b)], cp);
      a.byte_of_char[cp] = b;
    }
    return a;
  }();
  return alphabet;
}

}  // namespace

size_t utf8_incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  // The last byte that is not a continuation byte, within the last three: only it can start an
  // unfinished sequence.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    if (is_continuation(c)) continue;
    const LeadRule rule = lead_rule(c);
    return rule.length > back && valid_prefix(s, pos, back, rule) ? back : 0;
  }
  return 0;
}

const std::string& byte_to_gpt2_char(uint8_t b) { return gpt2_alphabet().char_of_byte[b]; }

int gpt2_char_to_byte(uint32_t cp) {
  const auto& table = gpt2_alphabet().byte_of_char;
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace slake::detail

namespace slake {

using namespace detail;  // the lead-byte rules above

size_t utf8_sequence_length(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const LeadRule rule = lead_rule(static_cast<unsigned char>(s[pos]));
  if (rule.length == 0 || rule.length > s.size() - pos) return 0;
  return valid_prefix(s, pos, rule.length, rule) ? rule.length : 0;
}

uint32_t utf8_decode(std::string_view s, size_t pos, size_t len) {
  auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[pos + k])); };
  switch (len) {
    case 1: return byte(0);
    case 2: return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3: return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    default: return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
  }
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace slake
