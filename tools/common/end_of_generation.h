// The tokens that end a reply, shared by slake-cli and slake-server.
#pragma once
#include <cstdint>
#include <limits>
#include <unordered_set>

#include "slake/model/model.h"

namespace slake::tools {

// The tokens that end a reply: EOS, EOT, and the control tokens that llama.cpp also treats as end
// of generation by their text (Llama 3's <|eot_id|> and <|eom_id|>, ChatML's <|im_end|>, ...),
// which a Hugging Face config.json does not always name as its EOS.
inline std::unordered_set<int32_t> end_of_generation_tokens(const Vocab& v) {
  std::unordered_set<int32_t> eog;
  if (v.eos >= 0) eog.insert(v.eos);
  if (v.eot >= 0) eog.insert(v.eot);
  static const char* const kEndTexts[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>",
                                          "<|endoftext|>", "<end_of_turn>", "</s>"};
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const bool control = i < v.types.size() && v.types[i] == 3;
    if (!control) continue;
    for (const char* t : kEndTexts)
      if (v.tokens[i] == t) eog.insert(static_cast<int32_t>(i));
  }
  return eog;
}

// --ignore-eos / ignore_eos: the end tokens banned from this step's logits, except where a grammar
// has matched the whole reply (`accepting`), which only an end token may then close.
inline void ban_end_of_generation(float* logits, const std::unordered_set<int32_t>& eog, bool accepting) {
  if (accepting) return;
  for (const int32_t t : eog) logits[t] = -std::numeric_limits<float>::infinity();
}

}  // namespace slake::tools
