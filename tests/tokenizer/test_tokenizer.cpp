// The tokenizers on real vocabularies (../shared): llama.cpp's test vectors for the Llama 2
// SentencePiece vocabulary and for GPT-2's byte-level BPE vocabulary, round trips over
// tinyshakespeare, stories260K's vocabulary loaded from GGUF and from our tokenizer.json, streaming
// output of characters spread over byte tokens, special tokens and invalid UTF-8.
#include <algorithm>
#include <random>
#include <sstream>

#include "slake/error.h"
#include "slake/model/llama2c.h"
#include "slake/format/mapped_file.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"
#include "slake/tokenizer/vocab.h"
#include "test_util.h"

namespace slake {
namespace {

struct TestVector {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's test-tokenizer-0 format: every string of .inp is followed by the separator line, so
// the newline just before "__ggml_vocab_test__" belongs to the separator, not to the string (the
// string "\n" is written as two newlines). Line k of .out holds the ids of string k.
std::vector<TestVector> read_test_vectors(const std::string& inp_path, const std::string& out_path) {
  const std::string inp = read_text_file(inp_path), out = read_text_file(out_path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<TestVector> vectors;
  for (size_t pos = 0, next; (next = inp.find(separator, pos)) != std::string::npos; pos = next + separator.size())
    vectors.push_back({inp.substr(pos, next - pos), {}});
  std::istringstream lines(out);
  std::string line;
  size_t k = 0;
  for (; std::getline(lines, line); ++k) {
    if (k >= vectors.size()) {
      ADD_FAILURE() << out_path << " has more lines than " << inp_path << " has strings";
      break;
    }
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) vectors[k].ids.push_back(id);
  }
  EXPECT_EQ(k, vectors.size()) << out_path << " and " << inp_path << " disagree on the number of tests";
  return vectors;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(read_text_file(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}


std::vector<int32_t> concat(std::vector<std::vector<int32_t>> parts) {
  std::vector<int32_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// Strict UTF-8 check, written independently of the library's.
bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) { n = 1; cp = c; }
    else if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3F);
    }
    const uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_length[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Stray continuation bytes, cut-off sequences, a surrogate, 5-byte forms, Latin-1, an overlong
// '/', and a NUL byte.
std::vector<std::string> invalid_utf8_samples() {
  return {"\xFF", "\x80\x80", "abc\xC3", "\xC3(", "\xE2\x82", "\xED\xA0\x80 surrogate", "\xF8\x88\x80\x80\x80",
          "caf\xE9 au lait", "\xC0\xAF overlong", std::string("nul\0byte", 8)};
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's test vectors: no BOS, special-token parsing off.

// Every string of `name`.inp tokenizes to its line of .out and detokenizes back to itself.
void check_test_vectors(const std::string& name) {
  SLAKE_SHARED_OR_SKIP(vocab_path, "tokenizers/" + name);
  const Tokenizer tok(load_vocab(vocab_path));
  const std::vector<TestVector> vectors = read_test_vectors(vocab_path + ".inp", vocab_path + ".out");
  ASSERT_FALSE(vectors.empty());
  size_t passed = 0;
  for (const TestVector& v : vectors) {
    const std::vector<int32_t> ids = tok.tokenize(v.text, false, false);
    EXPECT_EQ(ids, v.ids) << "text: '" << v.text << "'";
    passed += ids == v.ids;
    // The way back gives the string again (the space prefix of SentencePiece removed).
    EXPECT_EQ(tok.detokenize(v.ids), v.text);
  }
  std::printf("%s: %zu of %zu test vectors reproduced\n", name.c_str(), passed, vectors.size());
}

TEST(TokenizerVectors, LlamaSpm) { check_test_vectors("ggml-vocab-llama-spm.gguf"); }
TEST(TokenizerVectors, Gpt2) { check_test_vectors("ggml-vocab-gpt-2.gguf"); }

// ---------------------------------------------------------------------------------------------
// Round trips over real text.

// detokenize(tokenize(s)) == s for every line of tinyshakespeare, and for the whole file at once.
void check_round_trip(const std::string& name) {
  SLAKE_SHARED_OR_SKIP(vocab_path, "tokenizers/" + name);
  SLAKE_SHARED_OR_SKIP(text_path, "text/tinyshakespeare.txt");
  const Tokenizer tok(load_vocab(vocab_path));
  size_t failures = 0;
  for (const std::string& line : lines_of(text_path)) {
    if (tok.detokenize(tok.tokenize(line, false, false)) != line && ++failures <= 5) ADD_FAILURE() << "line: '" << line << "'";
  }
  EXPECT_EQ(failures, 0u);
  // The whole file as one text: long inputs, every kind of newline run.
  const std::string all = read_text_file(text_path);
  EXPECT_EQ(tok.detokenize(tok.tokenize(all, false, false)), all);
}

TEST(TokenizerRoundTrip, LlamaSpmTinyShakespeare) { check_round_trip("ggml-vocab-llama-spm.gguf"); }
TEST(TokenizerRoundTrip, Gpt2TinyShakespeare) { check_round_trip("ggml-vocab-gpt-2.gguf"); }

// Random byte strings (mostly invalid UTF-8, with spaces, newlines, multi-byte characters and
// pieces of special tokens mixed in) come back unchanged; with special-token parsing too for
// byte-level BPE, whose special tokens add no space. (No '▁' in them: SentencePiece gives it back as
// a space, see InvalidUtf8GoesThroughByteTokens.)
void check_random_bytes(const std::string& name) {
  SLAKE_SHARED_OR_SKIP(vocab_path, "tokenizers/" + name);
  const Tokenizer tok(load_vocab(vocab_path));
  const std::vector<std::string> parts = {" ", "  ", "\n", "\t", "a", "Hello", "'s", "3", "\xC3\xA9", "\xF0\x9F\xA6\x99",
                                          "<s>", "</s>", "<|endoftext|>", "<0x41>", "\xC3", "\x80", "\xFF", "\xED\xA0"};
  std::mt19937 rng(42);
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      if (rng() % 3 == 0) s += static_cast<char>(rng() % 256);
      else s += parts[rng() % parts.size()];
    }
    ASSERT_EQ(tok.detokenize(tok.tokenize(s, false, false)), s);
    const std::vector<int32_t> parsed = tok.tokenize(s, true, true);
    if (tok.vocab().model == "gpt2") {
      ASSERT_EQ(tok.detokenize(parsed, true), tok.token_to_piece(tok.vocab().bos, true) + s);
    }
  }
}

TEST(TokenizerRandomBytes, LlamaSpm) { check_random_bytes("ggml-vocab-llama-spm.gguf"); }
TEST(TokenizerRandomBytes, Gpt2) { check_random_bytes("ggml-vocab-gpt-2.gguf"); }

// ---------------------------------------------------------------------------------------------
// SentencePiece specifics on the Llama 2 vocabulary.

class TokenizerLlamaSpm : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_SHARED_OR_SKIP(path, "tokenizers/ggml-vocab-llama-spm.gguf");
    tok_ = std::make_unique<Tokenizer>(load_vocab(path));
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokenizerLlamaSpm, BosAndTheLeadingSpace) {
  const Tokenizer& tok = *tok_;
  const int32_t bos = tok.vocab().bos;
  ASSERT_GE(bos, 0);
  const std::vector<int32_t> hello = tok.tokenize("Hello world", false, false);
  EXPECT_EQ(tok.tokenize("Hello world", true, false), concat({{bos}, hello}));
  EXPECT_EQ(tok.token_to_piece(hello[0]), " Hello");
  // llama.cpp's rule: the first token's leading space is removed, and BOS, when it comes first,
  // takes that removal (it renders as ""), so the space after BOS stays.
  EXPECT_EQ(tok.detokenize(hello), "Hello world");
  EXPECT_EQ(tok.detokenize(concat({{bos}, hello})), " Hello world");
  EXPECT_EQ(tok.detokenize(concat({{bos}, hello}), true), "<s> Hello world");
}

TEST_F(TokenizerLlamaSpm, SpecialTokens) {
  const Tokenizer& tok = *tok_;
  const int32_t bos = tok.vocab().bos, eos = tok.vocab().eos;
  // Parsed: the text of BOS and EOS becomes those tokens; after a special token the text gets
  // the space prefix again, as at the start.
  EXPECT_EQ(tok.tokenize("<s>Hello</s>", false, true), concat({{bos}, tok.tokenize("Hello", false, false), {eos}}));
  EXPECT_EQ(tok.tokenize("Hi<s>Hello", false, true),
            concat({tok.tokenize("Hi", false, false), {bos}, tok.tokenize("Hello", false, false)}));
  // Not parsed: ordinary text.
  const std::vector<int32_t> plain = tok.tokenize("<s>Hello</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), bos) + std::count(plain.begin(), plain.end(), eos), 0);
  EXPECT_EQ(tok.detokenize(plain), "<s>Hello</s>");
}

TEST_F(TokenizerLlamaSpm, StreamingNeverSplitsACharacter) {
  const Tokenizer& tok = *tok_;
  // "é" has a piece of its own in this vocabulary; the emoji and the Fraktur letters do not and
  // go through <0xNN> byte tokens, four per character.
  const std::string text = "Café 🦙 naïve 😀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ok";
  const std::vector<int32_t> tokens = tok.tokenize(text, true, false);
  int byte_tokens = 0;
  for (int32_t t : tokens) byte_tokens += tok.vocab().types[static_cast<size_t>(t)] == 6;
  ASSERT_GE(byte_tokens, 8) << "the test needs characters that fall back to bytes";

  StreamingDetokenizer stream(tok);
  std::string streamed, pieces;
  int held_back = 0;
  for (int32_t t : tokens) {
    const std::string chunk = stream.push(t);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "chunk after token " << t;
    held_back += chunk.empty() && !tok.token_to_piece(t).empty();
    streamed += chunk;
    pieces += tok.token_to_piece(t);
  }
  streamed += stream.flush();
  EXPECT_GE(held_back, 6);  // three bytes of each 4-byte character wait for the fourth
  EXPECT_EQ(streamed, pieces);
  EXPECT_EQ(streamed, " " + text);  // BOS first: the space prefix stays (see BosAndTheLeadingSpace)
  EXPECT_EQ(streamed, tok.detokenize(tokens));

  // Bytes that can never become UTF-8 are passed on at once; a cut-off character comes out at flush().
  StreamingDetokenizer raw(tok);
  EXPECT_EQ(raw.push(test::token_id(tok.vocab().tokens, "<0xFF>")), "\xFF");
  EXPECT_EQ(raw.push(test::token_id(tok.vocab().tokens, "<0xF0>")), "");
  EXPECT_EQ(raw.push(test::token_id(tok.vocab().tokens, "<0x9F>")), "");
  EXPECT_EQ(raw.flush(), "\xF0\x9F");
}

// Invalid UTF-8: every byte that is not part of a well-formed character is a symbol of its own and
// becomes its <0xNN> token; the rest is tokenized as usual, and nothing is lost.
TEST_F(TokenizerLlamaSpm, InvalidUtf8GoesThroughByteTokens) {
  const Tokenizer& tok = *tok_;
  const int32_t space = test::token_id(tok.vocab().tokens, "\xE2\x96\x81");
  EXPECT_EQ(tok.tokenize("\xFF", false, false), (std::vector<int32_t>{space, test::token_id(tok.vocab().tokens, "<0xFF>")}));
  EXPECT_EQ(tok.tokenize("Hello\xC3", false, false), concat({tok.tokenize("Hello", false, false), {test::token_id(tok.vocab().tokens, "<0xC3>")}}));
  // A lead byte followed by ASCII: the lead byte alone falls back, "(" stays a normal character.
  const std::vector<int32_t> cut = tok.tokenize("\xC3(", false, false);
  EXPECT_EQ(cut, (std::vector<int32_t>{space, test::token_id(tok.vocab().tokens, "<0xC3>"), test::token_id(tok.vocab().tokens, "(")}));
  for (const std::string& s : invalid_utf8_samples()) EXPECT_EQ(tok.detokenize(tok.tokenize(s, false, false)), s);
  // The one thing that does not come back: SentencePiece cannot tell a '▁' in the text from a space.
  EXPECT_EQ(tok.detokenize(tok.tokenize("a\xE2\x96\x81" "b", false, false)), "a b");
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE specifics on the GPT-2 vocabulary.

class TokenizerGpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_SHARED_OR_SKIP(path, "tokenizers/ggml-vocab-gpt-2.gguf");
    tok_ = std::make_unique<Tokenizer>(load_vocab(path));
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokenizerGpt2, SpecialTokens) {
  const Tokenizer& tok = *tok_;
  const int32_t eot = test::token_id(tok.vocab().tokens, "<|endoftext|>");
  EXPECT_EQ(tok.vocab().types[static_cast<size_t>(eot)], 3);
  EXPECT_EQ(tok.tokenize("Hello<|endoftext|> world", false, true),
            concat({tok.tokenize("Hello", false, false), {eot}, tok.tokenize(" world", false, false)}));
  const std::vector<int32_t> plain = tok.tokenize("Hello<|endoftext|> world", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(tok.detokenize(plain), "Hello<|endoftext|> world");
  EXPECT_EQ(tok.detokenize({eot}), "");
  EXPECT_EQ(tok.detokenize({eot}, true), "<|endoftext|>");
}

// Invalid UTF-8: the pre-tokenizer regex never matches it, so each run of invalid bytes is a word
// of its own, tokenized through the byte alphabet (0xFF is 'ÿ'); nothing is lost.
TEST_F(TokenizerGpt2, InvalidUtf8IsAWordOfRawBytes) {
  const Tokenizer& tok = *tok_;
  EXPECT_EQ(tok.tokenize("\xFF", false, false), (std::vector<int32_t>{test::token_id(tok.vocab().tokens, "\xC3\xBF")}));
  EXPECT_EQ(tok.tokenize("a\xFF" "b", false, false), (std::vector<int32_t>{test::token_id(tok.vocab().tokens, "a"), test::token_id(tok.vocab().tokens, "\xC3\xBF"), test::token_id(tok.vocab().tokens, "b")}));
  for (const std::string& s : invalid_utf8_samples()) EXPECT_EQ(tok.detokenize(tok.tokenize(s, false, false)), s);
}

// ---------------------------------------------------------------------------------------------
// stories260K: llama.cpp's GGUF vocabulary (scores) and the tokenizer.json that our converter
// writes (BPE with byte fallback, merges but no scores) give the same ids.

class TokenizerStories : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_STORIES_OR_SKIP(dir);
    convert_llama2c(dir + "stories260K.bin", dir + "tok512.bin", "", tmp_.path());
    gguf_ = std::make_unique<Tokenizer>(load_vocab(dir + "stories260K.gguf"));
    hf_ = std::make_unique<Tokenizer>(load_vocab(tmp_.path()));
  }
  test::TempDir tmp_;
  std::unique_ptr<Tokenizer> gguf_, hf_;
};

TEST_F(TokenizerStories, GgufAndTokenizerJsonAgree) {
  ASSERT_TRUE(hf_->vocab().scores.empty());
  ASSERT_FALSE(hf_->vocab().merges.empty());
  const std::string story = "Once upon a time, there was a little girl named Lily.";
  const std::vector<int32_t> ids = gguf_->tokenize(story, true, false);
  EXPECT_EQ(hf_->tokenize(story, true, false), ids);
  EXPECT_EQ(gguf_->detokenize(ids), " " + story);  // BOS first keeps the space (llama.cpp's rule)

  const std::string text_path = test::shared_dir() + "/text/tinyshakespeare.txt";
  if (!test::exists(text_path)) GTEST_SKIP() << "shared material missing: " << text_path;
  const std::vector<std::string> lines = lines_of(text_path);
  size_t failures = 0;
  for (size_t i = 0; i < 500 && i < lines.size(); ++i) {
    const std::vector<int32_t> a = gguf_->tokenize(lines[i], false, false);
    if (hf_->tokenize(lines[i], false, false) != a && ++failures <= 5) ADD_FAILURE() << "line " << i << ": '" << lines[i] << "'";
    if (gguf_->detokenize(a) != lines[i] && ++failures <= 5) ADD_FAILURE() << "round trip, line " << i;
  }
  EXPECT_EQ(failures, 0u);
}

TEST_F(TokenizerStories, LoadVocabMatchesLoadModel) {
  const std::string dir = test::shared_dir() + "/models/";
  const Vocab from_model = load_model(dir + "stories260K.gguf")->vocab;
  const Vocab& alone = gguf_->vocab();
  EXPECT_EQ(alone.tokens, from_model.tokens);
  EXPECT_EQ(alone.scores, from_model.scores);
  EXPECT_EQ(alone.types, from_model.types);
  EXPECT_EQ(alone.bos, from_model.bos);
  EXPECT_EQ(alone.eos, from_model.eos);
  const Vocab hf_model = load_model(tmp_.path())->vocab;
  EXPECT_EQ(hf_->vocab().tokens, hf_model.tokens);
  EXPECT_EQ(hf_->vocab().merges, hf_model.merges);
  EXPECT_EQ(hf_->vocab().bos, hf_model.bos);
  EXPECT_TRUE(hf_->vocab().add_space_prefix);  // the converter's normalizer prepends '▁'
}

}  // namespace
}  // namespace slake
