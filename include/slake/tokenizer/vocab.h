// Vocabularies on their own: loading one without the model's weights, and token pieces to text.
#pragma once
#include <string>

#include "slake/model/model.h"

namespace slake {

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
