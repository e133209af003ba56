// Python's str methods over UTF-8 text, as the templates use them; code points where Python
// counts characters (len, indexing, slicing). Case mapping and whitespace are ASCII's.
#pragma once
#include <string>
#include <vector>

namespace slake::jinja {

std::vector<std::string> code_points(const std::string& s);
size_t code_point_count(const std::string& s);
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, long maxsplit);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, long count);
std::string py_upper(std::string s);
std::string py_lower(std::string s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);

}  // namespace slake::jinja
