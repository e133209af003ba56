// Logit biases: OpenAI's logit_bias (slake-server) and llama.cpp's --logit-bias (slake-cli). A bias
// is added to its token's logit before sampling; -100 or less bans the token (OpenAI's meaning of
// -100; llama.cpp's -inf bans it too).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "slake/error.h"

namespace slake::tools {

using LogitBias = std::vector<std::pair<int32_t, float>>;

inline void apply_logit_bias(float* logits, const LogitBias& bias) {
  for (const auto& [t, b] : bias) logits[t] = b <= -100.0f ? -std::numeric_limits<float>::infinity() : logits[t] + b;
}

// llama.cpp's --logit-bias TOKEN(+|-)BIAS: "15043+1", "15043-0.5", "15043-inf". Throws slake::Error.
inline std::pair<int32_t, float> parse_logit_bias(const std::string& s) {
  const auto bad = [&]() -> std::pair<int32_t, float> {
    fail("--logit-bias: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf), got '" + s + "'");
  };
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0 || i > 9 || i == s.size() || (s[i] != '+' && s[i] != '-')) return bad();
  const std::string v = s.substr(i + 1);
  if (v.empty() || v[0] == '+' || v[0] == '-' || v[0] == ' ') return bad();
  size_t used = 0;
  double b = 0;
  try {
    b = std::stod(v, &used);
  } catch (const std::exception&) {
    return bad();
  }
  if (used != v.size() || std::isnan(b) || (std::isinf(b) && s[i] == '+')) return bad();  // +inf: no distribution left
  return {static_cast<int32_t>(std::stol(s.substr(0, i))), static_cast<float>(s[i] == '-' ? -b : b)};
}

}  // namespace slake::tools
