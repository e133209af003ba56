// libFuzzer target: grammar text through the parser and checks (src/grammar/gbnf.cpp) and, from the
// first byte's choice, JSON Schema text through the converter (src/grammar/json_schema.cpp) first;
// a grammar that parses is then followed for a few steps over a small byte vocabulary, masks and
// all. Any input must parse or throw slake::Error; ASan/UBSan catch everything else.
#include <cstdint>
#include <string>

#include "request_env.h"
#include "slake/error.h"
#include "slake/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::Env env;
  static const auto vocab = std::make_shared<slake::GrammarVocab>(env.tokenizer, std::unordered_set<int32_t>{env.tokenizer.vocab().eos});
  if (size == 0) return 0;
  const bool schema = data[0] & 1;
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (schema) text = slake::json_schema_to_gbnf(text);
    slake::GrammarLimits limits;
    limits.max_text_bytes = 1 << 16;
    limits.max_elements = 1 << 14;
    limits.max_stacks = 256;
    const auto g = slake::Grammar::parse(text, "root", limits);
    slake::GrammarMatcher m(g, vocab);
    // Follow the lowest allowed token, then the highest, for a few steps.
    for (int step = 0; step < 8 && !m.finished(); ++step) {
      const std::vector<uint64_t>& mask = m.allowed();
      int32_t pick = -1;
      for (int32_t t = 0; t < vocab->n_vocab(); ++t)
        if (mask[static_cast<size_t>(t) / 64] >> (t % 64) & 1 && !vocab->is_end(t)) {
          pick = t;
          if (step % 2 == 0) break;
        }
      if (pick < 0) break;
      if (!m.accept_token(pick)) __builtin_trap();  // the mask allowed it
    }
  } catch (const slake::Error&) {
  }
  return 0;
}
