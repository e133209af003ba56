// GBNF grammars (include/slake/grammar/grammar.h): the parser's errors, the matcher against
// nlohmann::json's own validator on the JSON grammar, the trie-and-cache mask against a token-by-
// token check on a vocabulary with multi-byte and partial UTF-8 tokens, JSON Schema conversion,
// and llama.cpp's own example grammars.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>

#include "slake/error.h"
#include "slake/grammar/grammar.h"
#include "slake/tokenizer/tokenizer.h"
#include "test_util.h"

namespace slake {
namespace {

std::string error_of(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, ErrorsSayWhatAndWhere) {
  EXPECT_NE(error_of("root ::= foo\n").find("'foo' is used but not defined"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= a\na ::= b? a | \"y\"\nb ::= \"x\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" root\n").find("cannot match anything"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\n").find("unfinished literal"), std::string::npos);
  EXPECT_NE(error_of("root ::= [ab\n").find("unfinished character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]\n").find("backwards"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}\n").find("n < m"), std::string::npos);
  EXPECT_NE(error_of("x ::= \"a\"\n").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" )\n").find("unexpected ')' at 1:14"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')')).find("nested deeper"), std::string::npos);
  GrammarLimits small;
  small.max_text_bytes = 8;
  EXPECT_THROW(Grammar::parse("root ::= \"abcdef\"", "root", small), Error);
  EXPECT_EQ(error_of("root ::= (\"a\" | \"b\")* \"c\"? [^x-z]{2,3} . # comment\n"), "");
}

// A matcher over raw text: whether `text` is a whole match.
bool matches(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const GrammarVocab>& v, const std::string& text) {
  GrammarMatcher m(g, v);
  return m.accept_text(text) && m.accepting();
}

// GPT-2's byte-to-character map, so that a byte-level BPE vocabulary can hold any bytes.
std::string gpt2_text(const std::string& bytes) {
  std::string out;
  for (const unsigned char b : bytes) {
    int shifted = 0, cp = b;
    for (int i = 0; i <= b; ++i) {
      const bool printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
      if (i == b) cp = printable ? b : 256 + shifted;
      else if (!printable) ++shifted;
    }
    if (cp < 0x80) out += static_cast<char>(cp);
    else out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// The 256 bytes, then multi-byte tokens (JSON pieces, whole and partial UTF-8), then an end token.
Vocab test_vocab(const std::vector<std::string>& extra) {
  Vocab v;
  v.model = "gpt2";
  v.pre = "qwen2";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(gpt2_text(std::string(1, static_cast<char>(b)))), v.types.push_back(1);
  for (const std::string& e : extra) v.tokens.push_back(gpt2_text(e)), v.types.push_back(1);
  v.tokens.push_back("<|end|>");
  v.types.push_back(3);
  v.scores.assign(v.tokens.size(), 0.0f);
  v.eos = static_cast<int>(v.tokens.size()) - 1;
  v.add_bos = false;
  return v;
}

const std::vector<std::string> kExtra = {"{\"", "\":", "\": ", "true", "false", "null", " \"", ", \"", "},", "]}", "[1",
                                         "12", "-0", ".5", "e+", "\\u00", "\\n", "ab", "abc", "\"}", "\xC3\xA9", "\xE2\x82\xAC",
                                         "\xE2\x82", "\x82\xAC\"", "\xF0\x9F\x98\x80", "a\xC3", "  ", "\n ", "ab"};

struct Fixture {
  Fixture() : tok(test_vocab(kExtra)), vocab(std::make_shared<GrammarVocab>(tok, std::unordered_set<int32_t>{tok.vocab().eos})) {}
  Tokenizer tok;
  std::shared_ptr<const GrammarVocab> vocab;
};

TEST(GrammarMatcher, JsonGrammarAgreesWithNlohmann) {
  Fixture f;
  const auto g = Grammar::parse(json_value_gbnf());
  // Whatever the grammar takes whole is JSON: random strings over JSON's alphabet.
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\",:0123456789-.eEtrufalsn\\ \x01";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 10);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    if (matches(g, f.vocab, s)) {
      ++accepted;
      // nlohmann refuses numbers past a double's range ("4e671"), which JSON's syntax allows.
      const bool overflow = s.find_first_of("eE") != std::string::npos && std::abs(std::strtod(s.c_str(), nullptr)) == HUGE_VAL;
      EXPECT_TRUE(nlohmann::json::accept(s) || overflow) << s;
    }
  }
  EXPECT_GT(accepted, 100);
  // And it takes the JSON that a serializer writes.
  for (const char* text : {R"({"a":[1,-2.5e+3,true,null,{"b":"\u00e9\n"}],"c":{}})", R"([])", R"("x")", "0", "-0.5",
                           R"({"k":"caf\u00e9 \u20ac \ud83d\ude00"})"}) {
    const std::string compact = nlohmann::json::parse(text).dump();
    EXPECT_TRUE(matches(g, f.vocab, compact)) << compact;
  }
  for (const char* bad : {"01", "[1,]", "{\"a\" 1}", "\"\x01\"", "tru", "{'a':1}", "1.", "--1"}) {
    EXPECT_FALSE(nlohmann::json::accept(bad)) << bad;
    EXPECT_FALSE(matches(g, f.vocab, bad)) << bad;
  }
}

// The mask (a walk over the vocabulary's trie, cached per state) equals accepting each token on its
// own, at every step of random generations under several grammars.
TEST(GrammarMatcher, MaskEqualsTokenByTokenCheck) {
  Fixture f;
  const int n_vocab = f.vocab->n_vocab();
  std::mt19937 rng(11);
  for (const std::string& gbnf : {json_value_gbnf(), json_object_gbnf(),
                                  std::string("root ::= ([a-c]+ \" \")* [\\u00e9\\u20ac]+ | \"x\"{2,4}\n"),
                                  std::string("root ::= \"\\U0001F600\" [^a]* \"}\"\n")}) {
    const auto g = Grammar::parse(gbnf);
    for (int run = 0; run < 8; ++run) {
      GrammarMatcher m(g, f.vocab);
      for (int step = 0; step < 40 && !m.finished(); ++step) {
        const std::vector<uint64_t> mask = m.allowed();
        std::vector<int32_t> ok;
        for (int32_t t = 0; t < n_vocab; ++t) {
          GrammarMatcher copy = m;
          const bool expect = copy.accept_token(t);
          const bool got = mask[static_cast<size_t>(t) / 64] >> (t % 64) & 1;
          ASSERT_EQ(got, expect) << gbnf << " step " << step << " token " << t << " '" << f.vocab->bytes(t) << "'";
          if (got && !f.vocab->is_end(t)) ok.push_back(t);
        }
        if (ok.empty()) break;
        ASSERT_TRUE(m.accept_token(ok[rng() % ok.size()]));
      }
    }
  }
}

TEST(GrammarMatcher, EndTokenOnlyWhenWholeAndPartialUtf8Waits) {
  Fixture f;
  const auto g = Grammar::parse("root ::= \"a\" \"\\u20ac\"? \n");
  GrammarMatcher m(g, f.vocab);
  const int32_t end = f.tok.vocab().eos;
  EXPECT_FALSE(m.accept_token(end));
  EXPECT_TRUE(m.accept_text("a"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.finished());
  GrammarMatcher half = m;
  EXPECT_TRUE(half.accept_text("\xE2\x82"));  // a token that stops inside the euro sign
  EXPECT_FALSE(half.accepting());
  EXPECT_FALSE(half.accept_text("\xA9"));  // U+20A9 is not in the grammar
  EXPECT_TRUE(half.accept_text("\xAC"));
  EXPECT_TRUE(half.finished());
  EXPECT_FALSE(m.accept_text("\xC3\xA9"));  // é cannot begin where only € may
  // Overlong forms of a character are not that character: "a" as C1 A1 or F0 80 81 A1.
  GrammarMatcher fresh(g, f.vocab);
  EXPECT_FALSE(fresh.accept_text("\xC1"));
  EXPECT_FALSE(fresh.accept_text("\xF0\x80\x81"));
  EXPECT_FALSE(fresh.accept_text("\xE0\x81"));
  const auto any = Grammar::parse("root ::= .\n");
  GrammarMatcher dot(any, f.vocab);
  EXPECT_FALSE(GrammarMatcher(dot).accept_text("\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(GrammarMatcher(dot).accept_text("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_TRUE(GrammarMatcher(dot).accept_text("\xF4\x8F\xBF\xBF"));
  EXPECT_TRUE(m.accept_token(end));
}

// Integer ranges: every integer near the bounds matches exactly when it lies within them.
TEST(JsonSchema, IntegerRangesAreExact) {
  Fixture f;
  std::mt19937 rng(3);
  const std::vector<std::pair<long long, long long>> fixed = {{0, 0}, {0, 9}, {1, 10}, {7, 123}, {-5, 5}, {-120, -7},
                                                               {99, 1000}, {123, 456}, {0, 99999}, {-1, 0}};
  std::vector<std::pair<long long, long long>> ranges = fixed;
  for (int i = 0; i < 20; ++i) {
    const long long a = static_cast<long long>(rng() % 20000) - 10000, b = a + static_cast<long long>(rng() % 3000);
    ranges.emplace_back(a, b);
  }
  for (const auto& [lo, hi] : ranges) {
    const std::string schema = "{\"type\": \"integer\", \"minimum\": " + std::to_string(lo) + ", \"maximum\": " + std::to_string(hi) + "}";
    const auto g = Grammar::parse(json_schema_to_gbnf(schema));
    std::vector<long long> probe;
    for (long long v = lo - 30; v <= lo + 30; ++v) probe.push_back(v);
    for (long long v = hi - 30; v <= hi + 30; ++v) probe.push_back(v);
    for (int i = 0; i < 50; ++i) probe.push_back(lo + static_cast<long long>(rng() % static_cast<unsigned>(hi - lo + 1)));
    for (const long long v : probe)
      ASSERT_EQ(matches(g, f.vocab, std::to_string(v)), v >= lo && v <= hi) << schema << " " << v;
    EXPECT_FALSE(matches(g, f.vocab, "0" + std::to_string(std::max(lo, 1LL)))) << schema;  // no leading zero
  }
  // One bound only.
  const auto at_least = Grammar::parse(json_schema_to_gbnf(R"({"type": "integer", "exclusiveMinimum": 41})"));
  const auto at_most = Grammar::parse(json_schema_to_gbnf(R"({"type": "integer", "maximum": -3})"));
  for (long long v = -200; v <= 200; ++v) {
    ASSERT_EQ(matches(at_least, f.vocab, std::to_string(v)), v >= 42) << v;
    ASSERT_EQ(matches(at_most, f.vocab, std::to_string(v)), v <= -3) << v;
  }
  EXPECT_TRUE(matches(at_least, f.vocab, "123456789012"));
}

// Number ranges against a validator's double comparisons: every text the grammar takes lies
// within the bounds, and every number within them is taken (one past an exclusive bound by more
// than 1e-9, written with at most 12 decimals and no exponent, as the grammar writes numbers).
TEST(JsonSchema, NumberRangesTakeWhatLiesWithin) {
  Fixture f;
  struct Bound {
    std::string key;
    double v;
  };
  std::vector<std::vector<Bound>> cases = {
      {{"minimum", 0}}, {{"exclusiveMinimum", 0}}, {{"minimum", 0.5}, {"maximum", 2.25}},
      {{"exclusiveMinimum", -2.75}, {"exclusiveMaximum", 3}}, {{"minimum", -0.3}, {"maximum", -0.1}}, {{"maximum", 100.01}},
      {{"exclusiveMaximum", -1e-3}}, {{"minimum", 12.125}, {"maximum", 12.5}}, {{"minimum", 0.1}, {"maximum", 0.1}},
      {{"minimum", 1e-20}}, {{"exclusiveMinimum", 999999.999}, {"maximum", 1000001}}, {{"minimum", -7}, {"exclusiveMaximum", 0}},
      {{"minimum", 0.07}, {"maximum", 0.7}}, {{"minimum", 3.14159}, {"exclusiveMinimum", 2}, {"maximum", 9.99}}};
  std::mt19937 rng(5);
  for (int i = 0; i < 24; ++i) {
    const double lo = (static_cast<int>(rng() % 200000) - 100000) / 100.0, hi = lo + static_cast<int>(1 + rng() % 5000) / 1000.0;
    cases.push_back({{rng() % 2 ? "minimum" : "exclusiveMinimum", lo}, {rng() % 2 ? "maximum" : "exclusiveMaximum", hi}});
  }
  for (const std::vector<Bound>& c : cases) {
    std::string schema = R"({"type": "number")";
    char buf[64];
    for (const Bound& b : c) {
      std::snprintf(buf, sizeof buf, "%.17g", b.v);
      schema += ", \"" + b.key + "\": " + buf;
    }
    schema += "}";
    SCOPED_TRACE(schema);
    const auto g = Grammar::parse(json_schema_to_gbnf(schema));
    std::vector<std::string> texts = {"0", "-0", "1", "-1", "0.0", "1e3"};
    for (const Bound& b : c)
      for (int j = 0; j <= 4; ++j)
        for (int k = -25; k <= 25; ++k)
          for (const int d : {j, j + 1, 6}) {
            std::snprintf(buf, sizeof buf, "%.*f", d, b.v + k * std::pow(10.0, -j));
            texts.push_back(buf);
          }
    for (int i = 0; i < 200; ++i) {
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(rng() % 8), c[0].v + (static_cast<int>(rng() % 20001) - 10000) / 1000.0);
      texts.push_back(buf);
    }
    int taken = 0;
    for (const std::string& t : texts) {
      const double x = std::strtod(t.c_str(), nullptr);
      bool within = true, clear = t.find('e') == std::string::npos;
      for (const Bound& b : c) {
        if (b.key == "minimum") within &= x >= b.v;
        if (b.key == "maximum") within &= x <= b.v;
        if (b.key == "exclusiveMinimum") within &= x > b.v, clear &= x > b.v + 1e-9;
        if (b.key == "exclusiveMaximum") within &= x < b.v, clear &= x < b.v - 1e-9;
      }
      clear &= !(x == 0 && t[0] == '-');  // -0: zero written with a sign the grammar may leave out
      const bool m = matches(g, f.vocab, t);
      taken += m;
      if (m) {
        ASSERT_TRUE(within) << t;
      }
      if (within && clear) {
        ASSERT_TRUE(m) << t;
      }
    }
    EXPECT_GT(taken, 0);
  }
}

// A string's `pattern` against ECMAScript's own regular expressions (std::regex, the dialect JSON
// Schema names): for every string over a small alphabet up to 5 characters, and random longer
// ones, the grammar takes the string's JSON text exactly when the pattern is found in the string
// (unanchored, as JSON Schema reads it). The alphabet holds '"', '\\', a newline and '/', which
// JSON escapes (or may).
TEST(JsonSchema, PatternsMatchWhatEcmaScriptFinds) {
  Fixture f;
  const std::string alphabet = "ab1-\"\\\n/ ";
  std::vector<std::string> texts{""};
  for (size_t at = 0; at < texts.size() && texts.size() < 120000; ++at)
    if (texts[at].size() < 5)
      for (char c : alphabet) texts.push_back(texts[at] + c);
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::string t;
    for (int n = 6 + static_cast<int>(rng() % 8); n > 0; --n) t += alphabet[rng() % alphabet.size()];
    texts.push_back(t);
  }
  for (const char* pattern : {"^a+$", "a", "^(ab|1)*-?$", "^[a-b1]{2,3}$", "b1$", "^[^a]b.$", "^\\d\\s?\\w$",
                              "^\\D+$", "^(?:a|b){2}1*$", "^[\"\\\\/]+$", "^.{0,2}$", "^a|b$", "^\\n\\/", "^[-a]+?$",
                              "^b{2}$", "^[^\\d\\s]*$", "^$", "^a{2,}$", "(a|)1"}) {
    SCOPED_TRACE(pattern);
    const auto g = Grammar::parse(json_schema_to_gbnf(nlohmann::json{{"type", "string"}, {"pattern", pattern}}.dump()));
    const std::regex re(pattern, std::regex::ECMAScript);
    int found = 0;
    for (const std::string& t : texts) {
      const bool want = std::regex_search(t, re);
      found += want;
      ASSERT_EQ(matches(g, f.vocab, nlohmann::json(t).dump()), want) << nlohmann::json(t).dump();
    }
    EXPECT_GT(found, 0);  // the pattern is found somewhere: the test is not all refusals
  }
  // What a grammar cannot say, or what is malformed, is refused by name.
  for (const auto& [pattern, word] : std::vector<std::pair<std::string, std::string>>{
           {"(a)\\1", "backreference"}, {"a(?=b)", "lookaround"}, {"\\ba", "word boundary"}, {"a^b", "'^' after"},
           {"a$b", "'$' before"}, {"(ab", "unclosed '('"}, {"ab)", "unmatched ')'"}, {"[ab", "unclosed '['"},
           {"*a", "nothing to repeat"}, {"a**", "quantifier after"}, {"a{5,2}", "repetition"}, {"[b-a]", "out of order"},
           {"\\q", "unknown escape"}, {"(a*)*", "match nothing"}, {"(a|)+", "match nothing"}, {"(?:b?){2,}", "match nothing"},
           {std::string(30, '(') + "a" + std::string(30, ')'), "nests groups"}}) {
    try {
      json_schema_to_gbnf(nlohmann::json{{"type", "string"}, {"pattern", pattern}}.dump());
      ADD_FAILURE() << pattern;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << pattern << ": " << e.what();
    }
  }
  EXPECT_THROW(json_schema_to_gbnf(R"({"type": "string", "pattern": "^a$", "maxLength": 3})"), Error);
  // DEL, which the JSON grammars here take only escaped, and a bounded repeat of what may be empty.
  const auto del = Grammar::parse(json_schema_to_gbnf(R"({"type": "string", "pattern": "^[\u007f-\u0080]\u007f$"})"));
  EXPECT_TRUE(matches(del, f.vocab, "\"\\u007f\\u007f\""));
  EXPECT_TRUE(matches(del, f.vocab, "\"\u0080\\u007f\""));
  EXPECT_FALSE(matches(del, f.vocab, "\"a\\u007f\""));
  const auto opt = Grammar::parse(json_schema_to_gbnf(R"({"type": "string", "pattern": "^(a?){2,3}$"})"));
  for (const char* t : {"\"\"", "\"a\"", "\"aaa\""}) EXPECT_TRUE(matches(opt, f.vocab, t)) << t;
  EXPECT_FALSE(matches(opt, f.vocab, "\"aaaa\""));
}

TEST(JsonSchema, ObjectsArraysStringsAndRefs) {
  Fixture f;
  const std::string schema = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 5},
      "age": {"type": "integer", "minimum": 0},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3, null]}, "minItems": 1, "maxItems": 2},
      "when": {"type": "string", "format": "date"},
      "id": {"type": "string", "format": "uuid"},
      "kind": {"const": "x"},
      "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}
    },
    "required": ["name", "kind"],
    "additionalProperties": false,
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "boolean"}, "next": {"$ref": "#/$defs/node"}}}}
  })";
  const auto g = Grammar::parse(json_schema_to_gbnf(schema));
  for (const char* ok : {R"({"name": "ab", "kind": "x"})", R"({"name":"abcde","age":0,"kind":"x"})",
                         R"({"name": "a", "age": 31, "tags": ["a", 3], "when": "2024-02-29", "kind": "x"})",
                         R"({"name": "a", "id": "123e4567-e89b-12d3-a456-426614174000", "kind": "x", "next": null})",
                         R"({"name": "a", "kind": "x", "next": {"v": true, "next": {"next": {}}}})"})
    EXPECT_TRUE(matches(g, f.vocab, ok)) << ok;
  for (const char* bad : {R"({"kind": "x"})", R"({"name": "", "kind": "x"})", R"({"name": "abcdef", "kind": "x"})",
                          R"({"name": "a", "age": -1, "kind": "x"})", R"({"name": "a", "tags": [], "kind": "x"})",
                          R"({"name": "a", "tags": ["a", "b", "a"], "kind": "x"})", R"({"name": "a", "kind": "y"})",
                          R"({"name": "a", "when": "2024-13-01", "kind": "x"})", R"({"name": "a", "kind": "x", "other": 1})",
                          R"({"kind": "x", "name": "a"})", R"({"name": "a", "kind": "x", "next": {"v": 1}})"})
    EXPECT_FALSE(matches(g, f.vocab, bad)) << bad;
  // Keywords that constrain but are not converted are refused by name.
  for (const auto& [s, word] : std::vector<std::pair<std::string, std::string>>{
           {R"({"allOf": [{"type": "string"}]})", "'allOf'"},
           {R"({"type": "number", "multipleOf": 0.5})", "'multipleOf'"},
           {R"({"type": "number", "minimum": 3, "maximum": 2.5})", "range is empty"},
           {R"({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1})", "range is empty"},
           {R"({"type": "number", "minimum": "0"})", "'minimum' must be a number"},
           {R"({"type": "number", "minimum": 1e-300})", "40 decimal places"},
           {R"({"type": "string", "format": "email"})", "format 'email'"},
           {R"({"$ref": "#/$defs/missing"})", "names no definition"},
           {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b'"},
           {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
           {R"({"type": "strnig"})", "unknown type"},
           {R"({"type": "object", "properties": {"a": {}}, "additionalProperties": true})", "additionalProperties"},
           {R"({"type": )", "not valid JSON"}}) {
    try {
      json_schema_to_gbnf(s);
      ADD_FAILURE() << s;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << s << ": " << e.what();
    }
  }
  // OpenAI's usual shape: a type beside its enum.
  const auto typed_enum = Grammar::parse(json_schema_to_gbnf(R"({"type": "string", "enum": ["a", "b"]})"));
  EXPECT_TRUE(matches(typed_enum, f.vocab, "\"b\""));
  EXPECT_FALSE(matches(typed_enum, f.vocab, "\"c\""));
  // A schema that recurses without end matches nothing: the grammar check refuses it.
  EXPECT_THROW(Grammar::parse(json_schema_to_gbnf(
                   R"({"$ref": "#/$defs/a", "$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}}})")),
               Error);
}

// Grammars built to blow up are refused quickly, in bounded memory: empty paths that multiply,
// empty rules nested deep, repetitions past the size limit, schemas that multiply their nodes.
TEST(Gbnf, HostileGrammarsAreRefusedQuickly) {
  const auto wide = Grammar::parse("root ::= x{40} \"z\"\nx ::= \"\" | \"\"\n");
  EXPECT_THROW(GrammarMatcher(wide, nullptr), Error);
  const auto deep = Grammar::parse("root ::= a{3000}\na ::= \"\" | \"x\"\n");
  EXPECT_THROW(GrammarMatcher(deep, nullptr), Error);
  const auto fine = Grammar::parse("root ::= a{1500}\na ::= \"\" | \"x\"\n");
  EXPECT_NO_THROW(GrammarMatcher(fine, nullptr));
  std::string big = "root ::=";
  while (big.size() < (1u << 20) - 16) big += " a{0,99999}";
  big += "\na ::= \"a\"\n";
  EXPECT_THROW(Grammar::parse(big), Error);
  std::string nested = R"({"type": "string"})";
  for (int i = 0; i < 30; ++i) nested = R"({"type": ["array", "array"], "items": )" + nested + "}";
  EXPECT_THROW(json_schema_to_gbnf(nested), Error);
}

// llama.cpp's grammars/ folder (tests/fixtures/grammars, copied from llama.cpp 0c1e570), each
// parsed and followed on a text it describes.
TEST(Gbnf, LlamaCppGrammars) {
  const std::string dir = test::fixtures_dir() + "/grammars";
  Fixture f;
  // Texts each grammar describes whole (json_arr's and arithmetic's spaces are exactly theirs).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"json", "{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": null}}"},
      {"json_arr", "[\n{\"a\": 1},\ntrue]"},
      {"arithmetic", "x+1 = (y*2)\n"},
      {"list", "- eggs\n- milk \xE2\x82\xAC\n"},
      {"c", "int main(int argc){return argc+1;}"},
      {"chess", "1. e4 e5\n2. Nf3 Nc6\n"},
      {"english", "Hello, world."},
      {"japanese", "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF"}};
  for (const auto& [name, text] : cases) {
    std::ifstream in(dir + "/" + name + ".gbnf");
    ASSERT_TRUE(in) << dir << "/" << name << ".gbnf";
    std::stringstream ss;
    ss << in.rdbuf();
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = Grammar::parse(ss.str())) << name;
    GrammarMatcher m(g, f.vocab);
    EXPECT_TRUE(m.accept_text(text)) << name << ": " << text;
    EXPECT_TRUE(m.accepting()) << name;
    GrammarMatcher bad(g, f.vocab);
    EXPECT_FALSE(bad.accept_text(std::string("\x01\x02", 2) + text)) << name;
  }
}

}  // namespace
}  // namespace slake
