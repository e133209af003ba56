// JSON Schema -> GBNF (grammar.h's json_schema_to_gbnf). One rule per schema node, named by its
// path; primitives as in llama.cpp's converter (common/json-schema-to-grammar.cpp), whitespace
// bounded. A keyword that would constrain the output but is not converted is an error that names
// it: a schema is never followed only in part.
#include <algorithm>
#include <array>
#include <charconv>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "slake/error.h"
#include "slake/grammar/grammar.h"
#include "regex_gbnf.h"

namespace slake {

namespace {

using json = nlohmann::ordered_json;  // properties in the schema's order

const char* const kSpace = R"(| " " | "\n" [ \t]{0,20})";
const char* const kChar = R"([^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt/] | "u" [0-9a-fA-F]{4}))";
const char* const kInt = R"("-"? ([0-9] | [1-9] [0-9]{0,15}))";
const char* const kFrac = R"(("." [0-9]{1,16})? ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?)";  // bounded, as llama.cpp

// Keywords that describe without constraining.
const std::set<std::string> kNotes = {"title", "description", "$schema", "$id", "$comment", "default", "examples",
                                      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict", "name"};

std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int digits(long long v) { return v < 10 ? 1 : 1 + digits(v / 10); }

// GBNF alternatives for the decimal strings of the integers in [lo, hi], 0 <= lo <= hi, no sign:
// split into runs of one length, then by the first digit that differs.
void same_length(const std::string& a, const std::string& b, const std::string& prefix, std::vector<std::string>& out) {
  if (a.empty()) {
    out.push_back(prefix.empty() ? "\"\"" : prefix);
    return;
  }
  const std::string sep = prefix.empty() ? "" : prefix + " ";
  if (a[0] == b[0]) return same_length(a.substr(1), b.substr(1), sep + "\"" + a[0] + "\"", out);
  const size_t rest = a.size() - 1;
  const std::string nines(rest, '9'), zeros(rest, '0');
  const auto any = [&](size_t n) { return n == 0 ? std::string() : " [0-9]{" + std::to_string(n) + "}"; };
  char lo_first = a[0], hi_first = b[0];
  if (a.substr(1) != zeros) {
    same_length(a.substr(1), nines, sep + "\"" + a[0] + "\"", out);
    ++lo_first;
  }
  if (b.substr(1) != nines) {
    same_length(zeros, b.substr(1), sep + "\"" + b[0] + "\"", out);
    --hi_first;
  }
  if (lo_first <= hi_first) out.push_back(sep + "[" + lo_first + "-" + hi_first + "]" + any(rest));
}

std::string uint_range(long long lo, long long hi) {
  std::vector<std::string> alts;
  while (lo <= hi) {
    const int d = digits(lo);
    long long top = 1;
    for (int i = 0; i < d; ++i) top *= 10;
    const long long end = std::min(hi, top - 1);
    same_length(std::to_string(lo), std::to_string(end), "", alts);
    lo = end + 1;
  }
  std::string g;
  for (const std::string& a : alts) g += (g.empty() ? "" : " | ") + a;
  return "(" + g + ")";
}

// The integers >= lo (lo >= 0), without a sign, at most 16 digits.
std::string uint_at_least(long long lo) {
  const int d = digits(lo);
  long long top = 1;
  for (int i = 0; i < d; ++i) top *= 10;
  std::string g = uint_range(lo, top - 1);
  if (d < 16) g = "(" + g + " | [1-9] [0-9]{" + std::to_string(d) + "," + std::to_string(15) + "})";
  return g;
}

// Number ranges. A bound is read as the shortest decimal that parses back to its double, and a
// number is taken when its decimal text lies within the bounds: a text at or above a decimal
// parses to a double at or above that decimal's double, so every number taken validates. An
// exclusive bound becomes an inclusive one just past it (the next double, and at least 1e-16
// further, which keeps the decimal short). Numbers under a range are written without exponents.

// A language of fraction digits (what follows a number's "."): `ne`, the GBNF of its non-empty
// strings ("": none), and `eps`, whether it holds the empty string (the number has no fraction).
struct Frac {
  std::string ne;
  bool eps = false;
};

std::string digit_class(char a, char b) { return a == b ? std::string("\"") + a + "\"" : std::string("[") + a + "-" + b + "]"; }

Frac frac_any() { return {"[0-9]{1,16}", true}; }

Frac frac_alt(Frac a, const Frac& b) {
  a.ne = a.ne.empty() ? b.ne : b.ne.empty() ? a.ne : a.ne + " | " + b.ne;
  a.eps = a.eps || b.eps;
  return a;
}

// The digit d, then a string of `rest`.
Frac frac_then(char d, const Frac& rest) {
  std::string g = std::string("\"") + d + "\"";
  if (!rest.ne.empty()) g += (rest.eps ? " (" + rest.ne + ")?" : " (" + rest.ne + ")");
  return {g, false};
}

// The fractions f with 0.f >= 0.a (a: digits without trailing zeros).
Frac frac_at_least(const std::string& a) {
  if (a.empty()) return frac_any();
  Frac f = frac_then(a[0], frac_at_least(a.substr(1)));
  if (a[0] < '9') f = frac_alt({digit_class(static_cast<char>(a[0] + 1), '9') + " [0-9]{0,15}", false}, f);
  return f;
}

// The fractions f with 0.f <= 0.b.
Frac frac_at_most(const std::string& b) {
  if (b.empty()) return {"\"0\"{1,16}", true};
  Frac f = frac_then(b[0], frac_at_most(b.substr(1)));
  if (b[0] > '0') f = frac_alt({digit_class('0', static_cast<char>(b[0] - 1)) + " [0-9]{0,15}", false}, f);
  f.eps = true;
  return f;
}

// The fractions f with 0.a <= 0.f <= 0.b, given 0.a <= 0.b.
Frac frac_between(const std::string& a, const std::string& b) {
  if (a.empty()) return frac_at_most(b);
  if (a[0] == b[0]) return frac_then(a[0], frac_between(a.substr(1), b.substr(1)));
  Frac f = frac_then(a[0], frac_at_least(a.substr(1)));
  if (a[0] + 1 <= b[0] - 1) f = frac_alt(f, {digit_class(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)) + " [0-9]{0,15}", false});
  return frac_alt(f, frac_then(b[0], frac_at_most(b.substr(1))));
}

// A number's "." and fraction, from the fraction's language.
std::string frac_text(const Frac& f) {
  if (f.ne.empty()) return "";
  return f.eps ? "(\".\" (" + f.ne + "))?" : "\".\" (" + f.ne + ")";
}

// A magnitude as decimal digits: whole.frac, frac without trailing zeros.
struct Decimal {
  long long whole = 0;
  std::string frac;
};

// v >= 0 and at most 10^15; nullopt when its shortest decimal needs more than 40 places.
std::optional<Decimal> decimal_of(double v) {
  char buf[512];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  const std::string s(buf, r.ptr);
  Decimal d;
  const size_t dot = s.find('.');
  d.whole = std::stoll(s.substr(0, dot));
  if (dot != std::string::npos) d.frac = s.substr(dot + 1);
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  if (d.frac.size() > 40) return std::nullopt;
  return d;
}

// The unsigned decimal numbers x with lo <= x (<= hi, when given).
std::string magnitude_range(const Decimal& lo, const std::optional<Decimal>& hi) {
  std::vector<std::string> alts;
  const auto part = [&](long long whole, const Frac& f) {
    const std::string t = frac_text(f);
    alts.push_back("\"" + std::to_string(whole) + "\"" + (t.empty() ? "" : " " + t));
  };
  const std::string any = frac_text(frac_any());
  if (hi && hi->whole == lo.whole) {
    part(lo.whole, frac_between(lo.frac, hi->frac));
  } else {
    part(lo.whole, frac_at_least(lo.frac));
    if (!hi) {
      alts.push_back(uint_at_least(lo.whole + 1) + " " + any);
    } else {
      if (lo.whole + 1 <= hi->whole - 1) alts.push_back(uint_range(lo.whole + 1, hi->whole - 1) + " " + any);
      part(hi->whole, frac_at_most(hi->frac));
    }
  }
  std::string g;
  for (const std::string& a : alts) g += (g.empty() ? "" : " | ") + a;
  return "(" + g + ")";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  std::string run() {
    const std::string top = visit(root_, "root");
    if (top != "root") rules_["root"] = top;
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void refuse(const std::string& where, const std::string& what) {
    fail("JSON schema: " + what + (where.empty() ? "" : " (at " + where + ")"));
  }

  std::string rule(const std::string& name, const std::string& body) {
    std::string n;
    for (const char c : name) n += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '-';
    if (rules_.count(n) && rules_[n] != body) {
      int i = 1;
      while (rules_.count(n + "-" + std::to_string(i))) ++i;
      n += "-" + std::to_string(i);
    }
    rules_[n] = body;
    return n;
  }

  std::string primitive(const std::string& name) {
    if (name == "space") return rule("space", kSpace);
    if (name == "char") return rule("char", kChar);
    // Primitive names never clash: schema rules are named "root...", definitions "def-...".
    primitive("space");
    if (name == "string") {
      primitive("char");
      return rule("string", "\"\\\"\" char* \"\\\"\" space");
    }
    if (name == "number") return rule("number", std::string("(") + kInt + ") " + kFrac + " space");
    if (name == "integer") return rule("integer", std::string("(") + kInt + ") space");
    if (name == "boolean") return rule("boolean", "(\"true\" | \"false\") space");
    if (name == "null") return rule("null", "\"null\" space");
    if (name == "value" || name == "object") {
      for (const char* p : {"string", "number", "boolean", "null"}) primitive(p);
      rule("object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space");
      rule("array", "\"[\" space ( value (\",\" space value)* )? \"]\" space");
      rule("value", "object | array | string | number | boolean | null");
      return name;
    }
    fail("JSON schema: internal: no primitive " + name);
  }

  std::string literal(const json& v) {
    primitive("space");
    return gbnf_literal(v.dump()) + " space";
  }

  const json& resolve(const std::string& ref, const std::string& where) {
    for (const char* base : {"#/$defs/", "#/definitions/"}) {
      const std::string b = base;
      if (ref.compare(0, b.size(), b) == 0) {
        const std::string key = ref.substr(b.size());
        // find(), not operator[]: a const object's operator[] on a missing key is undefined.
        const auto defs = root_.is_object() ? root_.find(b.substr(2, b.size() - 3)) : root_.end();
        if (defs != root_.end() && defs->is_object()) {
          const auto it = defs->find(key);
          if (it != defs->end()) return *it;
        }
        refuse(where, "$ref '" + ref + "' names no definition");
      }
    }
    if (ref == "#") return root_;
    refuse(where, "$ref '" + ref + "' is not supported (only #, #/$defs/NAME and #/definitions/NAME)");
  }

  std::string visit(const json& s, const std::string& name) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(name, "the schema false matches nothing");
      return primitive("value");
    }
    if (!s.is_object()) refuse(name, "a schema must be an object or a boolean");
    if (++depth_ > 64) refuse(name, "nested deeper than 64");
    if (++visits_ > 100000) refuse(name, "more than 100000 schema nodes to convert");
    const std::string r = visit_object(s, name);
    --depth_;
    return r;
  }

  std::string visit_object(const json& s, const std::string& name) {
    std::set<std::string> used;
    const auto take = [&](const char* k) -> const json* {
      const auto it = s.find(k);
      if (it == s.end()) return nullptr;
      used.insert(k);
      return &*it;
    };
    std::string result;
    if (const json* ref = take("$ref")) {
      if (!ref->is_string()) refuse(name, "$ref must be a string");
      const std::string key = "ref " + ref->get<std::string>();
      const auto it = refs_.find(key);
      if (it != refs_.end()) {
        result = it->second;
      } else {
        std::string rname = ref->get<std::string>();
        rname = rname == "#" ? "root" : "def-" + rname.substr(rname.find_last_of('/') + 1);
        rname = rule(rname, "\"\"");  // reserved now, so a recursive reference finds it
        refs_[key] = rname;
        rules_[rname] = visit(resolve(ref->get<std::string>(), name), rname + "-body");
        result = rname;
      }
    } else if (const json* c = take("const")) {
      take("type");  // the value says more than the type
      result = rule(name, literal(*c));
    } else if (const json* e = take("enum")) {
      take("type");
      if (!e->is_array() || e->empty()) refuse(name, "enum must be a non-empty array");
      std::string alts;
      for (const json& v : *e) alts += (alts.empty() ? "" : " | ") + literal(v);
      result = rule(name, alts);
    } else if (const json* any = s.contains("anyOf") ? take("anyOf") : take("oneOf")) {
      if (!any->is_array() || any->empty()) refuse(name, "anyOf / oneOf must be a non-empty array");
      std::string alts;
      for (size_t i = 0; i < any->size(); ++i) alts += (alts.empty() ? "" : " | ") + visit((*any)[i], name + "-" + std::to_string(i));
      result = rule(name, alts);
    } else if (const json* t = take("type")) {
      if (t->is_array()) {
        std::string alts;
        for (const json& one : *t) {
          json sub = s;
          sub["type"] = one;
          alts += (alts.empty() ? "" : " | ") + visit(sub, name + "-" + (one.is_string() ? one.get<std::string>() : "t"));
        }
        if (alts.empty()) refuse(name, "type must not be an empty array");
        return rule(name, alts);
      }
      if (!t->is_string()) refuse(name, "type must be a string or an array of strings");
      result = typed(t->get<std::string>(), name, take);
    } else if (s.contains("properties")) {
      result = typed("object", name, take);
    } else if (s.contains("items") || s.contains("prefixItems")) {
      result = typed("array", name, take);
    } else {
      result = primitive("value");
    }
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (!used.count(k) && !kNotes.count(k)) refuse(name, "'" + k + "' is not supported here");
    }
    return result;
  }

  template <typename Take>
  std::string typed(const std::string& type, const std::string& name, Take&& take) {
    primitive("space");
    if (type == "null" || type == "boolean") return primitive(type);
    if (type == "string") return string_rule(name, take);
    if (type == "integer") return integer_rule(name, take);
    if (type == "number") return number_rule(name, take);
    if (type == "array") return array_rule(name, take);
    if (type == "object") return object_rule(name, take);
    refuse(name, "unknown type '" + type + "'");
  }

  static long long int_of(const json* v, const std::string& name, const char* what) {
    if (!v->is_number()) refuse(name, std::string("'") + what + "' must be an integer");
    // Range first: casting a double past long long's range is undefined.
    const double d = v->get<double>();
    if (!(std::fabs(d) <= 1e15)) refuse(name, std::string("'") + what + "' beyond 10^15");
    if (v->is_number_float() && d != std::floor(d)) refuse(name, std::string("'") + what + "' must be an integer");
    return v->is_number_float() ? static_cast<long long>(d) : v->get<long long>();
  }

  template <typename Take>
  std::string string_rule(const std::string& name, Take&& take) {
    const json* min = take("minLength");
    const json* max = take("maxLength");
    const json* f = take("format");
    if (const json* pat = take("pattern")) {
      if (min || max || f) refuse(name, "pattern with minLength, maxLength or format is not supported");
      if (!pat->is_string()) refuse(name, "'pattern' must be a string");
      primitive("char");
      return rule(name, "\"\\\"\" " + regex_to_gbnf(pat->get<std::string>()) + " \"\\\"\" space");
    }
    if (f) {
      if (min || max) refuse(name, "format with minLength / maxLength is not supported");
      const std::string fmt = f->is_string() ? f->get<std::string>() : "";
      const std::string date = R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1]))";
      const std::string time =
          R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? ("Z" | ("+" | "-") ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
      std::string body;
      if (fmt == "date") body = date;
      else if (fmt == "time") body = time;
      else if (fmt == "date-time") body = date + " \"T\" " + time;
      else if (fmt == "uuid") body = R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})";
      else refuse(name, "format '" + fmt + "' is not supported (date, time, date-time, uuid)");
      return rule(name, "\"\\\"\" " + body + " \"\\\"\" space");
    }
    if (!min && !max) return primitive("string");
    const long long lo = min ? int_of(min, name, "minLength") : 0;
    const long long hi = max ? int_of(max, name, "maxLength") : -1;
    if (lo < 0 || (max && hi < lo) || lo > 10000 || hi > 10000) refuse(name, "string lengths must be 0 <= minLength <= maxLength <= 10000");
    primitive("char");
    return rule(name, "\"\\\"\" char{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "} \"\\\"\" space");
  }

  template <typename Take>
  std::string integer_rule(const std::string& name, Take&& take) {
    std::optional<long long> lo, hi;
    if (const json* v = take("minimum")) lo = int_of(v, name, "minimum");
    if (const json* v = take("exclusiveMinimum")) lo = std::max(lo.value_or(LLONG_MIN), int_of(v, name, "exclusiveMinimum") + 1);
    if (const json* v = take("maximum")) hi = int_of(v, name, "maximum");
    if (const json* v = take("exclusiveMaximum")) hi = std::min(hi.value_or(LLONG_MAX), int_of(v, name, "exclusiveMaximum") - 1);
    if (!lo && !hi) return primitive("integer");
    if (lo && hi && *lo > *hi) refuse(name, "the integer range is empty");
    std::vector<std::string> alts;
    const std::string any_pos = "[1-9] [0-9]{0,15}";
    if (lo && hi) {
      if (*lo < 0) alts.push_back("\"-\" " + uint_range(std::max(1LL, -*hi), -*lo));
      if (*hi >= 0) alts.push_back(uint_range(std::max(0LL, *lo), *hi));
    } else if (lo) {
      if (*lo < 0) alts.push_back("\"-\" " + uint_range(1, -*lo)), alts.push_back("\"0\" | " + any_pos);
      else alts.push_back(uint_at_least(*lo));
    } else {
      if (*hi >= 0) alts.push_back(uint_range(0, *hi)), alts.push_back("\"-\" " + any_pos);
      else alts.push_back("\"-\" " + uint_at_least(-*hi));
    }
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
    return rule(name, "(" + body + ") space");
  }

  template <typename Take>
  std::string number_rule(const std::string& name, Take&& take) {
    std::optional<double> lo, hi;
    const auto bound = [&](const char* key, bool lower, bool exclusive) {
      const json* v = take(key);
      if (!v) return;
      if (!v->is_number()) refuse(name, std::string("'") + key + "' must be a number");
      double d = v->get<double>();
      if (!(std::fabs(d) <= 1e15)) refuse(name, std::string("'") + key + "' beyond 10^15");
      if (exclusive)
        d = lower ? std::max(std::nextafter(d, HUGE_VAL), d + 1e-16) : std::min(std::nextafter(d, -HUGE_VAL), d - 1e-16);
      if (lower) lo = lo ? std::max(*lo, d) : d;
      else hi = hi ? std::min(*hi, d) : d;
    };
    bound("minimum", true, false);
    bound("exclusiveMinimum", true, true);
    bound("maximum", false, false);
    bound("exclusiveMaximum", false, true);
    if (!lo && !hi) return primitive("number");
    if (lo && hi && *lo > *hi) refuse(name, "the number range is empty");
    const auto dec = [&](double v) {
      const std::optional<Decimal> d = decimal_of(v);
      if (!d) refuse(name, "a bound needs more than 40 decimal places");
      return *d;
    };
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {  // "-" and a magnitude in [max(0, -hi), -lo]
      std::optional<Decimal> top;
      if (lo) top = dec(-*lo);
      alts.push_back("\"-\" " + magnitude_range(dec(hi && *hi < 0 ? -*hi : 0.0), top));
    }
    if (!hi || *hi >= 0) {  // a magnitude in [max(0, lo), hi]
      std::optional<Decimal> top;
      if (hi) top = dec(*hi);
      alts.push_back(magnitude_range(dec(lo && *lo > 0 ? *lo : 0.0), top));
    }
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
    return rule(name, "(" + body + ") space");
  }

  template <typename Take>
  std::string array_rule(const std::string& name, Take&& take) {
    const json* items = take("items");
    const json* prefix = take("prefixItems");
    const json* min = take("minItems");
    const json* max = take("maxItems");
    if (prefix) {
      if (!prefix->is_array() || (items && !(items->is_boolean() && !items->get<bool>())) || min || max)
        refuse(name, "prefixItems is supported alone (with items: false)");
      std::string body = "\"[\" space";
      for (size_t i = 0; i < prefix->size(); ++i)
        body += std::string(i ? " \",\" space " : " ") + visit((*prefix)[i], name + "-" + std::to_string(i));
      return rule(name, body + " \"]\" space");
    }
    const std::string item = items ? visit(*items, name + "-item") : primitive("value");
    const long long lo = min ? int_of(min, name, "minItems") : 0;
    const long long hi = max ? int_of(max, name, "maxItems") : -1;
    if (lo < 0 || (max && hi < lo) || lo > 1000 || hi > 1000) refuse(name, "item counts must be 0 <= minItems <= maxItems <= 1000");
    if (hi == 0) return rule(name, "\"[\" space \"]\" space");
    const std::string more = "(\",\" space " + item + "){" + std::to_string(lo > 0 ? lo - 1 : 0) + "," +
                             (hi < 0 ? "" : std::to_string(hi - 1)) + "}";
    const std::string list = item + " " + more;
    return rule(name, "\"[\" space " + (lo > 0 ? list : "(" + list + ")?") + " \"]\" space");
  }

  template <typename Take>
  std::string object_rule(const std::string& name, Take&& take) {
    const json* props = take("properties");
    const json* req = take("required");
    const json* extra = take("additionalProperties");
    std::vector<std::string> keys;
    std::map<std::string, std::string> kv;
    if (props) {
      if (!props->is_object()) refuse(name, "properties must be an object");
      for (const auto& [k, v] : props->items()) keys.push_back(k);
    } else if (!extra) {
      return primitive("object");  // no properties named: any object
    }
    std::set<std::string> required;
    if (req) {
      if (!req->is_array()) refuse(name, "required must be an array");
      for (const json& r : *req) {
        if (!r.is_string()) refuse(name, "required must hold strings");
        if (!props || !props->contains(r.get<std::string>()))
          refuse(name, "required names '" + r.get<std::string>() + "', which is not among the properties");
        required.insert(r.get<std::string>());
      }
    }
    for (const std::string& k : keys)
      kv[k] = gbnf_literal(json(k).dump()) + " space \":\" space " + visit(props->at(k), name + "-" + k);
    std::string extra_kv;
    if (extra && !(extra->is_boolean() && !extra->get<bool>()) && !keys.empty())
      refuse(name, "additionalProperties other than false beside properties is not supported (the other keys could repeat "
                   "a declared one with any value)");
    if (extra && !(extra->is_boolean() && !extra->get<bool>())) {
      const std::string value = extra->is_boolean() ? primitive("value") : visit(*extra, name + "-additional");
      extra_kv = primitive("string") + " \":\" space " + value;
    }
    // tail(i, comma): the properties from i on, each optional one maybe left out, with a comma
    // before each when one came already; then any additional ones.
    std::vector<std::array<std::string, 2>> tail(keys.size() + 1);
    const std::string extras_rest = extra_kv.empty() ? "" : rule(name + "-extra", "(\",\" space " + extra_kv + ")*");
    tail[keys.size()][0] = extra_kv.empty() ? "\"\"" : "(" + extra_kv + " " + extras_rest + ")?";
    tail[keys.size()][1] = extra_kv.empty() ? "\"\"" : extras_rest;
    for (size_t i = keys.size(); i-- > 0;) {
      for (int comma = 0; comma < 2; ++comma) {
        const std::string take_it = std::string(comma ? "\",\" space " : "") + kv[keys[i]] + " " + tail[i + 1][1];
        const std::string body = required.count(keys[i]) ? take_it : take_it + " | " + tail[i + 1][comma];
        tail[i][comma] = rule(name + "-t" + std::to_string(i) + (comma ? "c" : ""), body);
      }
    }
    return rule(name, "\"{\" space " + tail[0][0] + " \"}\" space");
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
  size_t visits_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const std::string& schema) {
  json j;
  try {
    j = json::parse(schema);
  } catch (const json::exception& e) {
    fail(std::string("JSON schema: not valid JSON: ") + e.what());
  }
  return Converter(j).run();
}

}  // namespace slake
