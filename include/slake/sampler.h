// Choosing the next token from the logits, with llama.cpp's samplers and in llama.cpp's default
// order (common_sampler: penalties, top-k, top-p, min-p, temperature, then the draw):
//   1. penalties over the last `repeat_last_n` tokens seen (prompt included): the repetition
//      penalty divides a positive logit and multiplies a negative or zero one (llama.cpp's rule),
//      once per distinct token however often it occurred; then the frequency penalty times the
//      token's count and the presence penalty are subtracted (OpenAI's, as llama.cpp applies them);
//   1b. DRY (llama.cpp's "don't repeat yourself"): a token that would continue a repetition of L
//      tokens or more (L >= dry_allowed_length) of the last dry_penalty_last_n loses
//      dry_multiplier x dry_base^(L - dry_allowed_length); repetitions do not reach across a
//      sequence-breaker token (set_dry_breakers), and breakers are never penalised;
//   2. top-k: the k largest logits;
//   3. typical-p (locally typical sampling): the tokens whose surprise -log p is closest to the
//      entropy, in that order, until their probability sum passes p;
//   4. top-p: the smallest prefix (by probability, highest first) whose probability sum reaches p;
//   5. min-p: the tokens whose probability is at least p times the largest;
//   6. XTC (exclude top choices): with probability xtc_probability, when two or more tokens have a
//      probability of at least xtc_threshold, all of them but the least probable go;
//   7. temperature: the remaining logits divided by temp, softmax, one draw.
// Steps 2-6 use the softmax, over the tokens still in, of the penalised logits at temperature 1,
// exactly as llama.cpp, whose temperature sampler comes last: the temperature reshapes the
// survivors, never which survive. temp <= 0 is greedy (argmax of the penalised logits).
// mirostat = 2 replaces steps 1-7, as in llama.cpp: the softmax at the temperature, truncated to
// the tokens whose surprise (-log2 p) is at most mu, renormalised, one draw; then mu moves by eta
// times the draw's surprise minus tau (mu starts at 2 tau).
//
// Deterministic across standard libraries: ties are broken by the lower token id, and the draw is
// our own (a 53-bit uniform from std::mt19937_64, whose output the C++ standard fixes, walked
// along the cumulative probabilities), not std::discrete_distribution.
#pragma once
#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

namespace slake {

struct SamplerParams {
  float temp = 0.8f;            // <= 0: greedy
  int top_k = 40;               // 0: off; negative: an error
  float top_p = 0.95f;          // in (0, 1]; 1: off
  float min_p = 0.05f;          // in [0, 1]; 0: off
  float repeat_penalty = 1.0f;  // > 0; 1: off
  float typical_p = 1.0f;       // in (0, 1]; 1: off
  float xtc_probability = 0;    // in [0, 1]; 0: off
  float xtc_threshold = 0.1f;   // in [0, 1]; above 0.5 it can never apply
  int mirostat = 0;             // 0: off; 2: mirostat v2 (v1 is not implemented)
  float mirostat_tau = 5.0f;    // target surprise, > 0
  float mirostat_eta = 0.1f;    // learning rate, > 0
  float dry_multiplier = 0;     // >= 0; 0: off
  float dry_base = 1.75f;       // >= 1
  int dry_allowed_length = 2;   // >= 0
  int dry_penalty_last_n = -1;  // tokens DRY looks back over; -1: every token seen; 0: off
  float presence_penalty = 0;   // in [-2, 2]; 0: off
  float frequency_penalty = 0;  // in [-2, 2]; 0: off
  int repeat_last_n = 64;       // tokens the penalties look back over; 0: off; -1: every token seen
  uint64_t seed = 0;
};

// Throws slake::Error naming the parameter when it is outside the ranges above or not a number.
// llama.cpp accepts some of these and then misbehaves (top_p 0 keeps one token silently, a zero
// or negative penalty divides by zero or flips signs, a NaN temperature samples garbage); here
// they are refused.
void validate(const SamplerParams& params);

// A distribution over candidate tokens, most probable first (ties: lower id first).
struct TokenProbs {
  std::vector<int32_t> ids;
  std::vector<double> probs;  // sums to 1
};

// The distribution the sampler draws from for these logits, after every step above but mirostat
// (temp <= 0: the argmax alone, with probability 1). `recent` holds the tokens seen so far, oldest
// first; only its last repeat_last_n are penalised. XTC applies when `xtc_roll` (a uniform draw in
// [0, 1)) is at most xtc_probability. Throws slake::Error on invalid params or no logits.
// `dry_breakers`: the sequence-breaker tokens of DRY (null: none).
TokenProbs candidate_distribution(const SamplerParams& params, const float* logits, int n_vocab,
                                  const std::vector<int32_t>& recent, double xtc_roll = 2.0,
                                  const std::unordered_set<int32_t>* dry_breakers = nullptr);

// DRY's penalty on `logits` (double, the vocabulary's) after the tokens `recent`, oldest first.
void apply_dry(const SamplerParams& params, const std::vector<int32_t>& recent,
               const std::unordered_set<int32_t>& breakers, std::vector<double>& logits);

// Mirostat v2's distribution at the surprise bound `mu`: softmax(logits / temp), truncated to the
// tokens with -log2 p <= mu (at least the most probable), renormalised.
TokenProbs mirostat_distribution(const SamplerParams& params, const float* logits, int n_vocab, double mu);

// Index into `probs` of the candidate that a uniform number u in [0, 1) selects: the first whose
// cumulative probability exceeds u (the last one if rounding leaves u beyond the total).
size_t pick_index(const std::vector<double>& probs, double u);

// A sampling session: the parameters, the random generator and the tokens the penalty looks at.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);  // validates

  // The next token. Does not record it: call accept() for every token that enters the context
  // (the prompt's too, as llama.cpp does), so the penalty sees the whole history.
  int32_t sample(const float* logits, int n_vocab);
  void accept(int32_t token);
  // Forgets the accepted tokens and mirostat's surprise bound (the context starts again); the
  // random generator goes on.
  void forget_history() {
    recent_.clear();
    mu_ = 2.0 * params_.mirostat_tau;
  }

  const SamplerParams& params() const { return params_; }
  double mirostat_mu() const { return mu_; }
  // DRY's sequence breakers: tokens a repetition does not reach across (llama.cpp takes the
  // tokens whose text contains one of the breaker strings: "\n", ":", "\"", "*" by default).
  void set_dry_breakers(std::unordered_set<int32_t> b) { dry_breakers_ = std::move(b); }

 private:
  double uniform();  // 53 random bits: uniform in [0, 1)
  SamplerParams params_;
  std::mt19937_64 rng_;
  double mu_;  // mirostat's surprise bound
  std::unordered_set<int32_t> dry_breakers_;
  std::vector<int32_t> recent_;  // the last repeat_last_n accepted tokens (all with -1)
};

}  // namespace slake
