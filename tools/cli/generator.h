// The generation loop of slake-cli: feeding tokens into the context, sampling, streaming the text,
// and the speed counters reported at the end.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "../common/backend.h"
#include "../common/end_of_generation.h"
#include "../common/logit_bias.h"
#include "slake/context.h"
#include "slake/grammar/grammar.h"
#include "slake/sampler.h"
#include "slake/tokenizer/tokenizer.h"

namespace slake::cli {

using tools::end_of_generation_tokens;

struct Reply {
  std::string text;       // everything written to the output
  bool ended = false;     // stopped at an end-of-generation token
  bool ctx_full = false;  // stopped because the context is full
  bool stopped = false;   // stopped at a reverse prompt (-r), which the last token's text completed
};

class Generator {
 public:
  // All four must outlive the generator.
  Generator(tools::Session& ctx, const Tokenizer& tokenizer, Sampler& sampler, std::FILE* out);

  // Evaluates `tokens` after what the context holds (and after the last sampled token, which is
  // evaluated only now, so that a reply that is not continued costs nothing). `what` names the
  // tokens in the error when they do not fit: slake::Error, with the context unchanged.
  void feed(const std::vector<int32_t>& tokens, const std::string& what);

  // Writes `tokens` to the output as text (the prompt's echo), through the same streaming
  // detokenizer as the generated text.
  void echo(const std::vector<int32_t>& tokens);

  // Samples up to n_predict tokens (-1: no limit) from the logits of the last feed, writing each
  // one's text as soon as it completes a UTF-8 character. Stops early at an end-of-generation token
  // or when the context is full, or when the grammar is matched whole and nothing may follow.
  Reply generate(int n_predict);

  // The grammar every later reply must match (each reply from its start); null: none.
  void set_grammar(std::shared_ptr<const Grammar> g) { grammar_ = std::move(g); }
  // Biases added to the logits before every sample (--logit-bias); ids within the vocabulary.
  void set_logit_bias(tools::LogitBias bias) { bias_ = std::move(bias); }
  // --ignore-eos: no end-of-generation token is sampled (tools::ban_end_of_generation).
  void set_ignore_eos(bool on) { ignore_eos_ = on; }
  // Strings that end a reply once its text ends with one (-r).
  void set_stops(std::vector<std::string> stops) { stops_ = std::move(stops); }
  // Empties the context, to start again from nothing (the counters go on).
  void reset();

  // Counters for the final report.
  int prompt_tokens() const { return prompt_tokens_; }
  double prompt_seconds() const { return prompt_s_; }
  int generated_tokens() const { return generated_; }
  double generation_seconds() const { return gen_s_; }

 private:
  void write(const std::string& text);

  tools::Session& ctx_;
  const Tokenizer& tokenizer_;
  Sampler& sampler_;
  std::FILE* out_;
  StreamingDetokenizer detok_;
  std::unordered_set<int32_t> eog_;
  std::shared_ptr<const Grammar> grammar_;
  std::vector<std::string> stops_;
  tools::LogitBias bias_;
  bool ignore_eos_ = false;
  std::shared_ptr<const GrammarVocab> grammar_vocab_;  // made for the first grammar
  std::vector<float> logits_;
  std::vector<int32_t> unevaluated_;  // the last sampled token, until the next feed
  int prompt_tokens_ = 0, generated_ = 0;
  double prompt_s_ = 0, gen_s_ = 0;
};

}  // namespace slake::cli
