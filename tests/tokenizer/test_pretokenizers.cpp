// The BPE pre-tokenizers (src/tokenizer/pretokenizer.cpp) split text into the words that Hugging
// Face's tokenizers library gives for the same Split sequences (tests/fixtures/pretokenizers.json,
// from models/make_pretokenizer_fixtures.py: another regex engine, Oniguruma, on strings that
// exercise each regex: case changes, digits, CJK, full-width forms, emoji, whitespace runs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "slake/error.h"
#include "slake/format/mapped_file.h"
#include "slake/tokenizer/vocab.h"
#include "test_util.h"
#include "tokenizer/tokenizer_internal.h"

namespace slake {
namespace {

std::vector<std::string> words(const std::string& pre, const std::string& text) {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  const detail::TokenIndex index(v);
  const detail::BpeEncoder enc(v, index);
  std::vector<std::string> out;
  enc.split(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

TEST(PreTokenizers, SplitLikeHuggingFaceTokenizers) {
  const nlohmann::json j = nlohmann::json::parse(read_text_file(test::fixtures_dir() + "/pretokenizers.json"));
  const auto texts = j["texts"].get<std::vector<std::string>>();
  ASSERT_GE(j["pretokenizers"].size(), 7u);
  for (const auto& [name, expected] : j["pretokenizers"].items())
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(words(name, texts[i]), expected[i].get<std::vector<std::string>>()) << name << " on '" << texts[i] << "'";
}

TEST(PreTokenizers, UnknownNameIsAClearError) {
  try {
    words("qwen9", "text");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre-tokenizer 'qwen9' is not supported"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace slake
