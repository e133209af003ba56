// The pre-tokenizers of byte-level BPE vocabularies: the regexes that split text into words before
// merging, by the name llama.cpp's converters store in tokenizer.ggml.pre. A pre-tokenizer is a
// sequence of regexes, as Hugging Face's Sequence of Split pre-tokenizers ("Isolated") and
// llama.cpp's regex lists: each regex splits every word of the one before into its matches and
// the runs between them, all of which are words.
#pragma once
#include <string>

namespace slake::detail {

constexpr int kMaxPreTokenizerPatterns = 6;

struct PreTokenizer {
  const char* name;
  // PCRE2 syntax, matched with Unicode properties (UTF + UCP), in order; nullptr after the last.
  const char* patterns[kMaxPreTokenizerPatterns];
  // Llama 3: a word that is itself a token is taken whole, before any merge (tokenizer.json's
  // "ignore_merges"; llama.cpp sets it for the same names).
  bool ignore_merges;
};

// nullptr for a name this engine does not know.
const PreTokenizer* find_pretokenizer(const std::string& name);
// The pre-tokenizer of one pattern that is exactly `pattern` (a tokenizer.json Split regex), or nullptr.
const PreTokenizer* find_pretokenizer_by_pattern(const std::string& pattern);
// "gpt-2, llama-bpe, ...": for error messages.
std::string known_pretokenizer_names();

}  // namespace slake::detail
