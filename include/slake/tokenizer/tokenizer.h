// Text to token ids and back, for the two vocabulary families of Llama models, with llama.cpp's
// rules:
//   "llama" (SentencePiece-style, Llama 2 / Mistral): a space is put before the text, spaces
//     become '▁', and neighbouring pieces are merged by the score of the merged piece, highest
//     first; characters that no piece covers fall back to <0xNN> byte tokens.
//   "gpt2" (byte-level BPE, GPT-2 / Llama 3): a regex splits the text into words, every byte of a
//     word becomes one character of GPT-2's byte alphabet, and pairs are merged by rank.
//
// Invalid UTF-8 is never an error and never lost: bytes that are not part of a well-formed UTF-8
// sequence are tokenized as single bytes (SentencePiece: their <0xNN> tokens; byte-level BPE: their
// byte-alphabet characters, as a word of their own), so detokenize gives them back unchanged.
// (llama.cpp differs here: its BPE replaces them with U+FFFD.)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slake/tokenizer/vocab.h"

namespace slake {

class Tokenizer {
 public:
  // Throws slake::Error when the vocabulary cannot be used: no tokens, a tokenizer model other
  // than "llama" or "gpt2", a pre-tokenizer it does not know, arrays of inconsistent lengths.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // BOS first when `add_bos` and the vocabulary has one (callers wanting the model's own choice pass
  // vocab().add_bos). With `parse_special`, the text of control and unknown tokens ("<s>",
  // "<|eot_id|>") becomes those tokens. User-defined tokens are always matched as a whole, as
  // llama.cpp and Hugging Face's tokenizers do. Longer special texts win over shorter ones; the text
  // between them is tokenized normally (for SentencePiece, with the space prefix again after each
  // special token, as llama.cpp does).
  std::vector<int32_t> tokenize(const std::string& text, bool add_bos, bool parse_special) const;

  // llama.cpp's llama_detokenize(remove_special = false, unparse_special = special): the pieces
  // joined, with one leading space removed from the first token's piece when the vocabulary adds a
  // space prefix (SentencePiece). That first token may be BOS: BOS renders as "" and takes the
  // removal with it, so [BOS, "▁Hello"] gives " Hello" while ["▁Hello"] gives "Hello", exactly as
  // llama.cpp. Hence detokenize(tokenize(s, false, false)) == s for every string s, except that
  // SentencePiece cannot tell a '▁' in the text from a space: it comes back as ' '.
  // No clean-up of spaces before punctuation (llama.cpp does that for GPT-2; it is lossy).
  std::string detokenize(const std::vector<int32_t>& tokens, bool special = false) const;

  // One token's text, nothing removed (slake::token_to_piece): what streaming output prints.
  const std::string& token_to_piece(int32_t token, bool special = false) const;

  const Vocab& vocab() const;
  int n_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Byte offset of the first byte of `text` that is not part of well-formed UTF-8, or
// std::string::npos when it is all valid. (For tools that refuse such input rather than pass it on.)
size_t find_invalid_utf8(const std::string& text);

// Token-by-token output that never splits a UTF-8 character: a multi-byte character spread over
// several byte tokens (<0xF0><0x9F><0xA6><0x99>) is held back until its last byte arrives. Bytes
// that can never become valid UTF-8 are passed on as they are, so the concatenation of everything
// push() and flush() return equals the concatenation of the tokens' pieces.
class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool special = false)
      : tokenizer_(tokenizer), special_(special) {}

  // The text that this token completes (possibly "").
  std::string push(int32_t token);
  // What is still held back (an unfinished character at the end of the stream), as it is.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  std::string pending_;
};

}  // namespace slake
