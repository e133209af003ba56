// Token pieces to text, for the vocabularies of model files.
#pragma once
#include <string>

#include "slake/model.h"

namespace slake {

// The text of one token as it appears in generated output: SentencePiece pieces turn '▁' into a
// space and <0xNN> into byte NN; byte-level BPE pieces are mapped back from GPT-2's byte alphabet;
// control tokens give "".
std::string token_to_piece(const Vocab& v, int token);

}  // namespace slake
