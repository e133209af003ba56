// Internal to the tokenizers: the token index both algorithms share and the two encoders that
// Tokenizer (tokenizer.cpp) runs on the text between special tokens.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "slake/tokenizer/vocab.h"

namespace slake::detail {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

inline int32_t token_type(const Vocab& v, int32_t id) {
  return static_cast<size_t>(id) < v.types.size() ? v.types[static_cast<size_t>(id)] : kTokenNormal;
}

// Text -> id over every token of a vocabulary. Empty texts (holes in a tokenizer.json) are left
// out; of two tokens with the same text the first is kept. The keys view the Vocab's strings,
// which must outlive the index and not change.
class TokenIndex {
 public:
  explicit TokenIndex(const Vocab& v);
  int32_t find(std::string_view text) const {  // -1 when absent
    const auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<std::string_view, int32_t> ids_;
};

// llama.cpp's llm_tokenizer_spm: greedy merging of neighbouring pieces by the score of the merged
// piece, over text whose spaces are already '▁' (and with the space prefix in place).
class SpmEncoder {
 public:
  SpmEncoder(const Vocab& vocab, const TokenIndex& index);
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  int32_t piece_id(std::string_view text) const;  // -1 unless a token the text may turn into

  const Vocab& vocab_;
  const TokenIndex& index_;
  // Per token: the score a merge into it has. -infinity: no merge makes it (control, unknown and
  // byte tokens, and with merge-derived scores, pieces no merge produces).
  std::vector<float> merge_score_;
  std::array<int32_t, 256> byte_token_;  // byte fallback: <0xNN>, else the byte itself, else unk, else -1
};

// llama.cpp's llm_tokenizer_bpe: regex pre-tokenizer, GPT-2 byte alphabet, merges by rank.
class BpeEncoder {
 public:
  BpeEncoder(const Vocab& vocab, const TokenIndex& index);  // throws for an unknown pre-tokenizer
  ~BpeEncoder();
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // The pre-tokenizer's words of `text`, in order (what encode merges, word by word).
  void split(std::string_view text, const std::function<void(std::string_view)>& word) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // the merged token, -1 when the vocabulary lacks it
  };
  class Regex;

  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Splits `piece` with regexes_[level] and each word further with the next ones.
  void split_from(size_t level, std::string_view piece, const std::function<void(std::string_view)>& word) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  const Vocab& vocab_;
  const TokenIndex& index_;
  std::vector<std::unique_ptr<Regex>> regexes_;  // the pre-tokenizer's, in order
  bool ignore_merges_ = false;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  std::array<int32_t, 256> byte_token_;          // the token of each byte's alphabet character, or -1
};

}  // namespace slake::detail
