// Python's str methods, with its corner cases: split() without a separator drops empty fields,
// replace("", x) inserts between characters, splitlines() knows "\r\n".
#include "text.h"

#include <cctype>

namespace slake::jinja {

namespace {
bool py_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }
size_t cp_len(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1; }
}  // namespace

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = cp_len(static_cast<unsigned char>(s[i]));
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  // With `chars`, any of its code points are stripped (ASCII ones: compared bytewise).
  auto strip_here = [&](size_t i) { return chars ? chars->find(s[i]) != std::string::npos : py_space(s[i]); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip_here(b)) ++b;
  if (right)
    while (e > b && strip_here(e - 1)) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && py_space(s[e - 1])) --e;
        out.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !py_space(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t start = 0;
  for (;;) {
    if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) break;
    const size_t at = s.find(*sep, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
      out.push_back(s.substr(start, i - start));
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, long count) {
  std::string out;
  if (from.empty()) {
    long n = 0;
    const auto cps = code_points(s);
    for (const auto& cp : cps) {
      if (count < 0 || n < count) out += to, ++n;
      out += cp;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  long n = 0;
  for (;;) {
    const size_t at = (count >= 0 && n >= count) ? std::string::npos : s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string py_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string py_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace slake::jinja
