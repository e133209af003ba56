// The pre-tokenizers of byte-level BPE vocabularies: the regex that splits text into words before
// merging, by the name llama.cpp's converters store in tokenizer.ggml.pre.
#pragma once
#include <string>

namespace slake::detail {

struct PreTokenizer {
  const char* name;
  const char* pattern;  // PCRE2 syntax, matched with Unicode properties (UTF + UCP)
  // Llama 3: a word that is itself a token is taken whole, before any merge (tokenizer.json's
  // "ignore_merges"; llama.cpp sets it for the same names).
  bool ignore_merges;
};

// nullptr for a name this engine does not know.
const PreTokenizer* find_pretokenizer(const std::string& name);
// The pre-tokenizer whose pattern is exactly `pattern` (a tokenizer.json Split regex), or nullptr.
const PreTokenizer* find_pretokenizer_by_pattern(const std::string& pattern);
// "gpt-2, llama-bpe, ...": for error messages.
std::string known_pretokenizer_names();

}  // namespace slake::detail
