// DRY's sequence breakers as llama.cpp takes them: the tokens whose text contains one of the
// breaker strings ("\n", ":", "\"", "*" by default). (llama.cpp also matches a breaker split over
// several tokens; here a breaker must fall inside one token, which the one-character defaults
// always do.)
#pragma once
#include <string>
#include <unordered_set>
#include <vector>

#include "slake/tokenizer/tokenizer.h"

namespace slake::tools {

inline const std::vector<std::string>& default_dry_breakers() {
  static const std::vector<std::string> kDefault = {"\n", ":", "\"", "*"};
  return kDefault;
}

inline std::unordered_set<int32_t> dry_breaker_tokens(const Tokenizer& tok, const std::vector<std::string>& breakers) {
  std::unordered_set<int32_t> out;
  for (int32_t t = 0; t < tok.n_tokens(); ++t) {
    const std::string& piece = tok.token_to_piece(t, false);
    for (const std::string& b : breakers)
      if (!b.empty() && piece.find(b) != std::string::npos) {
        out.insert(t);
        break;
      }
  }
  return out;
}

}  // namespace slake::tools
