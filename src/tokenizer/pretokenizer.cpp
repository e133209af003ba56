#include "pretokenizer.h"

#include <iterator>
#include <string>

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

// Mistral Nemo's "tekken" pattern, as its tokenizer.json has it: a letter run split at case
// changes (an upper-case run, then lower-case letters), single digits.
constexpr const char* kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Every digit alone (Hugging Face's Digits pre-tokenizer with individual_digits).
constexpr const char* kSingleDigit = R"(\p{N})";

// DeepSeek LLM and DeepSeek Coder: newlines alone, letter runs (DeepSeek LLM: a list of Latin,
// Greek, Cyrillic... ranges), punctuation runs, CJK runs and digits, as their tokenizer.json's
// Split sequences (and llama.cpp's lists) have them.
constexpr const char* kNewline = "[\r\n]";
constexpr const char* kCjk = "[一-龥ࠀ-一가-퟿]+";
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
constexpr const char* kDeepseekLlmPunct = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";

// An empty name (files converted before tokenizer.ggml.pre existed) and "default" get GPT-2's
// pattern.
constexpr PreTokenizer kPreTokenizers[] = {
    {"gpt-2", {kGpt2Pattern}, false},
    {"default", {kGpt2Pattern}, false},
    {"", {kGpt2Pattern}, false},
    {"llama-bpe", {kLlama3Pattern}, true},
    {"llama3", {kLlama3Pattern}, true},
    {"llama-v3", {kLlama3Pattern}, true},
    {"falcon3", {kLlama3Pattern}, true},
    {"smollm", {kSingleDigit, kGpt2Pattern}, false},
    {"tekken", {kTekkenPattern}, true},
    {"deepseek-llm", {kNewline, kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+$", kCjk, "\\p{N}+"}, false},
    {"deepseek-coder", {kNewline, "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, kSingleDigit}, false},
};

}  // namespace

const PreTokenizer* find_pretokenizer(const std::string& name) {
  for (const PreTokenizer& p : kPreTokenizers)
    if (name == p.name) return &p;
  return nullptr;
}

const PreTokenizer* find_pretokenizer_by_pattern(const std::string& pattern) {
  for (const PreTokenizer& p : kPreTokenizers)
    if (p.patterns[1] == nullptr && pattern == p.patterns[0]) return &p;
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
