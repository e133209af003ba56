// A vocabulary as a model file stores it (the tokenizers are built from it), loading one without
// the model's weights, and token pieces to text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace slake {

// The vocabulary as the file stores it; the tokenizers are built from this.
struct Vocab {
  std::string model;  // "llama" (SentencePiece-style), "gpt2" (byte-level BPE), "" when absent
  std::string pre;    // pre-tokenizer name (tokenizer.ggml.pre)
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user, 5 unused, 6 byte
  std::vector<std::string> merges;
  int bos = -1, eos = -1, unk = -1, eot = -1;
  bool add_bos = true;
  // SentencePiece ("llama"): a space is put before the text, so that its first word is tokenized
  // like every other word ("▁Hello"). tokenizer.ggml.add_space_prefix; true unless a file says not.
  bool add_space_prefix = true;
  std::string chat_template;  // GGUF tokenizer.chat_template, or chat_template of HF tokenizer_config.json
};

// Loads just the vocabulary: from a GGUF file (vocabulary-only files included, as llama.cpp's
// ggml-vocab-*.gguf) or from a Hugging Face directory's tokenizer.json (with BOS/EOS ids from its
// config.json when there is one). Throws slake::Error("<file>: <problem>").
Vocab load_vocab(const std::string& path);

// The text of one token as it appears in generated output: SentencePiece pieces turn '▁' into a
// space and <0xNN> into byte NN; byte-level BPE pieces are mapped back from GPT-2's byte alphabet;
// user-defined tokens give their text as written. Control and unknown tokens give "" unless
// `special` (then their text, e.g. "</s>"), unused tokens and ids outside the vocabulary give "".
// (llama.cpp's llama_token_to_piece with lstrip 0.)
std::string token_to_piece(const Vocab& v, int token, bool special = false);

}  // namespace slake
