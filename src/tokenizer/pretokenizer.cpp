#include "pretokenizer.h"

#include <iterator>

namespace slake::detail {

namespace {

// GPT-2's pattern (openai/gpt-2 encoder.py). The last alternative only matters for whitespace
// that the lookahead alternative leaves behind: "a  b" -> "a", " ", " b".
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3's pattern, exactly as its tokenizer.json has it: case-insensitive contractions, a letter
// run with at most one leading non-letter, digits in groups of at most three, punctuation with
// its trailing newlines, newline runs with their leading spaces.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// An empty name (files converted before tokenizer.ggml.pre existed) and "default" get GPT-2's
// pattern.
constexpr PreTokenizer kPreTokenizers[] = {
    {"gpt-2", kGpt2Pattern, false},
    {"default", kGpt2Pattern, false},
    {"", kGpt2Pattern, false},
    {"llama-bpe", kLlama3Pattern, true},
    {"llama3", kLlama3Pattern, true},
    {"llama-v3", kLlama3Pattern, true},
};

}  // namespace

const PreTokenizer* find_pretokenizer(const std::string& name) {
  for (const PreTokenizer& p : kPreTokenizers)
    if (name == p.name) return &p;
  return nullptr;
}

const PreTokenizer* find_pretokenizer_by_pattern(const std::string& pattern) {
  for (const PreTokenizer& p : kPreTokenizers)
    if (pattern == p.pattern) return &p;
  return nullptr;
}

std::string known_pretokenizer_names() {
  std::string names;
  for (const PreTokenizer& p : kPreTokenizers) {
    if (*p.name == '\0') continue;
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

}  // namespace slake::detail
