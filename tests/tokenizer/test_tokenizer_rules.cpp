// The tokenizers' rules on small hand-made vocabularies (no shared material needed): merge order
// and ties, byte fallback, merge ranks, special-token matching, vocabulary checks, and loading a
// vocabulary alone from GGUF and tokenizer.json files.
#include <algorithm>

#include "slake/error.h"
#include "slake/tokenizer/tokenizer.h"
#include "slake/tokenizer/vocab.h"
#include "slake/format/writers.h"
#include "test_util.h"

namespace slake {
namespace {

const std::string kSpace = "\xE2\x96\x81";  // SentencePiece's '▁'

class VocabBuilder {
 public:
  explicit VocabBuilder(const std::string& model) { v_.model = model; }
  VocabBuilder& add(const std::string& text, int32_t type = 1, float score = 0) {
    v_.tokens.push_back(text);
    v_.types.push_back(type);
    v_.scores.push_back(score);
    return *this;
  }
  Vocab& vocab() { return v_; }

 private:
  Vocab v_;
};

// <unk>, <s>, </s>, optionally the 256 byte tokens, then `pieces` (normal, with their scores).
Vocab spm_vocab(const std::vector<std::pair<std::string, float>>& pieces, bool byte_tokens = true) {
  VocabBuilder b("llama");
  b.add("<unk>", 2).add("<s>", 3).add("</s>", 3);
  if (byte_tokens) {
    for (int i = 0; i < 256; ++i) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", i);
      b.add(name, 6);
    }
  }
  for (const auto& [text, score] : pieces) b.add(text, 1, score);
  Vocab v = b.vocab();
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  return v;
}

// GPT-2's byte alphabet, written out here independently of the library.
std::string gpt2_char(int byte) {
  const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
  int cp = byte;
  if (!printable) {
    cp = 256;
    for (int b = 0; b < byte; ++b)
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) ++cp;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The 256 byte characters, then one token per merge result, merges in the given order.
Vocab bpe_vocab(const std::vector<std::string>& merges, const std::string& pre = "gpt-2") {
  VocabBuilder b("gpt2");
  for (int i = 0; i < 256; ++i) b.add(gpt2_char(i));
  for (const std::string& m : merges) {
    std::string merged = m;
    merged.erase(merged.find(' '), 1);
    if (std::find(b.vocab().tokens.begin(), b.vocab().tokens.end(), merged) == b.vocab().tokens.end()) b.add(merged);
  }
  Vocab v = b.vocab();
  v.merges = merges;
  v.pre = pre;
  v.scores.clear();
  return v;
}


using Ids = std::vector<int32_t>;

TEST(TokenizerSpmRules, HighestScoreFirstAndLeftmostOnTies) {
  // "aba" -> "▁", "a", "b", "a": "ab" and "ba" can both form.
  const Tokenizer tie(spm_vocab({{kSpace, -1}, {"a", -2}, {"b", -3}, {"ab", -5}, {"ba", -5}}));
  EXPECT_EQ(tie.tokenize("aba", false, false), (Ids{test::token_id(tie.vocab().tokens, kSpace), test::token_id(tie.vocab().tokens, "ab"), test::token_id(tie.vocab().tokens, "a")}));
  const Tokenizer ba_first(spm_vocab({{kSpace, -1}, {"a", -2}, {"b", -3}, {"ab", -5}, {"ba", -4}}));
  EXPECT_EQ(ba_first.tokenize("aba", false, false), (Ids{test::token_id(ba_first.vocab().tokens, kSpace), test::token_id(ba_first.vocab().tokens, "a"), test::token_id(ba_first.vocab().tokens, "ba")}));
  // Merges build on merges: "▁a" + "ba" once both exist.
  const Tokenizer chain(spm_vocab({{kSpace, -1}, {"a", -2}, {"b", -3}, {"ba", -4}, {kSpace + "a", -5}, {kSpace + "aba", -6}}));
  EXPECT_EQ(chain.tokenize("aba", false, false), (Ids{test::token_id(chain.vocab().tokens, kSpace + "aba")}));
}

TEST(TokenizerSpmRules, SpacesAndPrefix) {
  Vocab v = spm_vocab({{kSpace, -1}, {"a", -2}, {kSpace + "a", -3}});
  const Tokenizer with_prefix(v);
  EXPECT_EQ(with_prefix.tokenize("a a", false, false), (Ids{test::token_id(with_prefix.vocab().tokens, kSpace + "a"), test::token_id(with_prefix.vocab().tokens, kSpace + "a")}));
  EXPECT_EQ(with_prefix.tokenize("", false, false), Ids{});
  EXPECT_EQ(with_prefix.tokenize("", true, false), Ids{1});
  EXPECT_EQ(with_prefix.detokenize(with_prefix.tokenize("a a", false, false)), "a a");
  v.add_space_prefix = false;  // tokenizer.ggml.add_space_prefix = false
  const Tokenizer without(v);
  EXPECT_EQ(without.tokenize("a a", false, false), (Ids{test::token_id(without.vocab().tokens, "a"), test::token_id(without.vocab().tokens, kSpace + "a")}));
  EXPECT_EQ(without.detokenize(without.tokenize("a a", false, false)), "a a");
}

TEST(TokenizerSpmRules, ByteFallbackAndUnknown) {
  const Tokenizer bytes(spm_vocab({{kSpace, -1}, {"a", -2}}));
  EXPECT_EQ(bytes.tokenize("a\xC3\xA9", false, false),
            (Ids{test::token_id(bytes.vocab().tokens, kSpace), test::token_id(bytes.vocab().tokens, "a"), test::token_id(bytes.vocab().tokens, "<0xC3>"), test::token_id(bytes.vocab().tokens, "<0xA9>")}));
  EXPECT_EQ(bytes.detokenize(bytes.tokenize("a\xC3\xA9", false, false)), "a\xC3\xA9");
  // No byte tokens: each byte of an uncovered character becomes the unknown token.
  const Tokenizer no_bytes(spm_vocab({{kSpace, -1}, {"a", -2}}, false));
  EXPECT_EQ(no_bytes.tokenize("a\xC3\xA9", false, false), (Ids{test::token_id(no_bytes.vocab().tokens, kSpace), test::token_id(no_bytes.vocab().tokens, "a"), 0, 0}));
}

TEST(TokenizerSpmRules, ScoresFromMergeRanks) {
  // tokenizer.json has merges, not scores: merge rank r scores its piece -r.
  Vocab v = spm_vocab({{kSpace, 0}, {"a", 0}, {"b", 0}, {"ab", 0}, {"ba", 0}});
  v.scores.clear();
  v.merges = {"b a", "a b"};
  const Tokenizer ba_first(v);
  EXPECT_EQ(ba_first.tokenize("aba", false, false), (Ids{test::token_id(ba_first.vocab().tokens, kSpace), test::token_id(ba_first.vocab().tokens, "a"), test::token_id(ba_first.vocab().tokens, "ba")}));
  v.merges = {"a b", "b a"};
  const Tokenizer ab_first(v);
  EXPECT_EQ(ab_first.tokenize("aba", false, false), (Ids{test::token_id(ab_first.vocab().tokens, kSpace), test::token_id(ab_first.vocab().tokens, "ab"), test::token_id(ab_first.vocab().tokens, "a")}));
}

TEST(TokenizerSpecialTokens, LongestFirstAndUserDefinedAlways) {
  Vocab v = spm_vocab({{kSpace, -1}, {"a", -2}, {"b", -3}});
  VocabBuilder b("llama");
  b.vocab() = v;
  b.add("<x>", 3).add("<x><y>", 3).add("<u>", 4);
  const Tokenizer tok(b.vocab());
  const int32_t x = test::token_id(tok.vocab().tokens, "<x>"), xy = test::token_id(tok.vocab().tokens, "<x><y>"), u = test::token_id(tok.vocab().tokens, "<u>");
  EXPECT_EQ(tok.tokenize("<x><y><x>", false, true), (Ids{xy, x}));
  // After a special token the text gets the space prefix again (llama.cpp).
  EXPECT_EQ(tok.tokenize("a<x>b", false, true), (Ids{test::token_id(tok.vocab().tokens, kSpace), test::token_id(tok.vocab().tokens, "a"), x, test::token_id(tok.vocab().tokens, kSpace), test::token_id(tok.vocab().tokens, "b")}));
  // Control tokens are text without parse_special; user-defined tokens are matched regardless.
  const Ids plain = tok.tokenize("<x>", false, false);
  EXPECT_TRUE(std::find(plain.begin(), plain.end(), x) == plain.end());
  EXPECT_EQ(tok.tokenize("a<u>b", false, false), (Ids{test::token_id(tok.vocab().tokens, kSpace), test::token_id(tok.vocab().tokens, "a"), u, test::token_id(tok.vocab().tokens, kSpace), test::token_id(tok.vocab().tokens, "b")}));
  EXPECT_EQ(tok.detokenize({u}), "<u>");
  EXPECT_EQ(tok.detokenize({x}), "");
  EXPECT_EQ(tok.detokenize({x}, true), "<x>");
}

TEST(TokenizerBpeRules, LowestRankFirst) {
  const Tokenizer bc_first(bpe_vocab({"b c", "a b"}));
  EXPECT_EQ(bc_first.tokenize("abc", false, false), (Ids{test::token_id(bc_first.vocab().tokens, "a"), test::token_id(bc_first.vocab().tokens, "bc")}));
  const Tokenizer ab_first(bpe_vocab({"a b", "b c", "ab c"}));
  EXPECT_EQ(ab_first.tokenize("abc", false, false), (Ids{test::token_id(ab_first.vocab().tokens, "abc")}));
  // Words never merge across the pre-tokenizer's boundaries; spaces are 'Ġ' (U+0120).
  const std::string space = gpt2_char(' ');
  const Tokenizer words(bpe_vocab({space + " a", "a b"}));
  EXPECT_EQ(words.tokenize("ab ab", false, false), (Ids{test::token_id(words.vocab().tokens, "ab"), test::token_id(words.vocab().tokens, space + "a"), test::token_id(words.vocab().tokens, "b")}));
  EXPECT_EQ(words.detokenize(words.tokenize("ab ab", false, false)), "ab ab");
}

TEST(TokenizerBpeRules, Llama3TakesWholeWordsAndSplitsDigits) {
  // ignore_merges: a word that is a token is taken whole even without a merge path to it.
  Vocab v = bpe_vocab({"1 2"}, "llama-bpe");
  v.tokens.push_back("xyz");
  v.types.push_back(1);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.tokenize("xyz", false, false), (Ids{test::token_id(tok.vocab().tokens, "xyz")}));
  const Tokenizer gpt2(bpe_vocab({"1 2"}));
  // Llama 3 cuts digit runs into groups of three: "1212" -> "121", "2".
  EXPECT_EQ(tok.tokenize("1212", false, false), (Ids{test::token_id(tok.vocab().tokens, "12"), test::token_id(tok.vocab().tokens, "1"), test::token_id(tok.vocab().tokens, "2")}));
  EXPECT_EQ(gpt2.tokenize("1212", false, false), (Ids{test::token_id(gpt2.vocab().tokens, "12"), test::token_id(gpt2.vocab().tokens, "12")}));
}

TEST(TokenizerVocabChecks, BadVocabulariesAreErrors) {
  Vocab empty;
  empty.model = "llama";
  EXPECT_THROW(Tokenizer{empty}, Error);
  Vocab bert = spm_vocab({{"a", 0}});
  bert.model = "bert";
  try {
    Tokenizer t(bert);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bert'"), std::string::npos) << e.what();
  }
  try {
    Tokenizer t(bpe_vocab({}, "chatglm-bpe"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre-tokenizer 'chatglm-bpe' is not supported"), std::string::npos) << e.what();
  }
  Vocab short_scores = spm_vocab({{"a", 0}});
  short_scores.scores.pop_back();
  EXPECT_THROW(Tokenizer{short_scores}, Error);
  Vocab bad_bos = spm_vocab({{"a", 0}});
  bad_bos.bos = 100000;
  EXPECT_THROW(Tokenizer{bad_bos}, Error);
  // Ids outside the vocabulary detokenize to nothing.
  const Tokenizer tok(spm_vocab({{kSpace + "a", 0}}));
  EXPECT_EQ(tok.detokenize({test::token_id(tok.vocab().tokens, kSpace + "a"), -1, 1 << 30}), "a");
}

TEST(TokenizerLoadVocab, VocabularyOnlyGguf) {
  test::TempDir tmp;
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  w.set_str("tokenizer.ggml.model", "llama");
  const Vocab v = spm_vocab({{kSpace, -1}, {"a", -2}, {kSpace + "a", -3}});
  w.set_str_array("tokenizer.ggml.tokens", v.tokens);
  w.set_f32_array("tokenizer.ggml.scores", v.scores);
  w.set_i32_array("tokenizer.ggml.token_type", v.types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  w.write(tmp.file("vocab.gguf"));
  const Vocab loaded = load_vocab(tmp.file("vocab.gguf"));
  EXPECT_EQ(loaded.tokens, v.tokens);
  EXPECT_EQ(loaded.scores, v.scores);
  EXPECT_EQ(loaded.types, v.types);
  EXPECT_EQ(loaded.bos, 1);
  EXPECT_FALSE(loaded.add_space_prefix);

  GgufWriter no_tokens;
  no_tokens.set_str("general.architecture", "llama");
  no_tokens.write(tmp.file("empty.gguf"));
  EXPECT_THROW(load_vocab(tmp.file("empty.gguf")), Error);
  try {
    load_vocab(tmp.file("missing.gguf"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), tmp.file("missing.gguf") + ": no such file or directory");
  }
  try {
    load_vocab(tmp.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoadVocab, TokenizerJsonPreTokenizers) {
  test::TempDir tmp;
  const std::string llama3_regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";
  auto write = [&](const std::string& pre_tokenizer) {
    write_file(tmp.file("tokenizer.json"),
               R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "pre_tokenizer": )" +
                   pre_tokenizer + "}");
  };
  write(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")" + llama3_regex +
        R"("}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]})");
  EXPECT_EQ(load_vocab(tmp.path()).pre, "llama-bpe");
  EXPECT_EQ(Tokenizer(load_vocab(tmp.path())).tokenize("ab", false, false), (Ids{2}));
  write(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})");
  EXPECT_EQ(load_vocab(tmp.path()).pre, "gpt-2");
  write(R"({"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated"})");
  try {
    Tokenizer t(load_vocab(tmp.path()));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\\d+"), std::string::npos) << e.what();
  }
}

TEST(TokenizerUtf8, FindInvalidUtf8GivesTheFirstBadByte) {
  EXPECT_EQ(find_invalid_utf8(""), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xF0\x9F\xA6\x99"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("a\xFF"), 1u);
  EXPECT_EQ(find_invalid_utf8("caf\xC3"), 3u);              // cut short
  EXPECT_EQ(find_invalid_utf8("ab\xC0\xAF"), 2u);          // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);        // a surrogate
  EXPECT_EQ(find_invalid_utf8(std::string("a\0b", 3)), std::string::npos);
}

}  // namespace
}  // namespace slake
