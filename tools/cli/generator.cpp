#include "generator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "slake/error.h"

namespace slake::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(tools::Session& ctx, const Tokenizer& tokenizer, Sampler& sampler, std::FILE* out)
    : ctx_(ctx),
      tokenizer_(tokenizer),
      sampler_(sampler),
      out_(out),
      detok_(tokenizer),
      eog_(end_of_generation_tokens(tokenizer.vocab())) {}

void Generator::feed(const std::vector<int32_t>& tokens, const std::string& what) {
  std::vector<int32_t> batch = unevaluated_;
  batch.insert(batch.end(), tokens.begin(), tokens.end());
  if (batch.empty()) return;
  const int64_t need = static_cast<int64_t>(ctx_.n_past()) + static_cast<int64_t>(batch.size());
  if (need > ctx_.n_ctx()) {
    const std::string n = std::to_string(batch.size()), c = std::to_string(ctx_.n_ctx());
    if (ctx_.n_past() == 0) fail(what + " is " + n + " tokens, more than the context holds (-c " + c + ")");
    fail(what + " needs " + n + " more tokens after the " + std::to_string(ctx_.n_past()) +
         " it holds, more than the context holds (-c " + c + ")");
  }
  const auto t0 = std::chrono::steady_clock::now();
  ctx_.eval(batch, &logits_);
  prompt_s_ += seconds_since(t0);
  prompt_tokens_ += static_cast<int>(tokens.size());
  for (const int32_t t : tokens) sampler_.accept(t);
  unevaluated_.clear();
}

void Generator::reset() {
  ctx_.reset();
  sampler_.forget_history();
  logits_.clear();
  unevaluated_.clear();
}

void Generator::write(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
}

void Generator::echo(const std::vector<int32_t>& tokens) {
  for (const int32_t t : tokens) write(detok_.push(t));
}

Reply Generator::generate(int n_predict) {
  Reply r;
  if (logits_.empty()) fail("nothing to generate from: no tokens were fed");
  const int n_vocab = ctx_.model().cfg.n_vocab;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<GrammarMatcher> matcher;
  if (grammar_) {
    if (!grammar_vocab_) {
      const auto v0 = std::chrono::steady_clock::now();
      grammar_vocab_ = std::make_shared<GrammarVocab>(tokenizer_, eog_);
      std::fprintf(stderr, "slake-cli: the grammar's token trie of %d tokens (%zu nodes) built in %.1f ms\n",
                   grammar_vocab_->n_vocab(), grammar_vocab_->nodes.size(), seconds_since(v0) * 1000);
    }
    matcher = std::make_unique<GrammarMatcher>(grammar_, grammar_vocab_);
  }
  for (int n = 0; n_predict < 0 || n < n_predict;) {
    tools::apply_logit_bias(logits_.data(), bias_);
    if (ignore_eos_) tools::ban_end_of_generation(logits_.data(), eog_, matcher && matcher->accepting());
    const int32_t tok = matcher ? sample_with_grammar(sampler_, *matcher, logits_.data(), n_vocab)
                                : sampler_.sample(logits_.data(), n_vocab);
    if (tok < 0) fail("grammar: no token of the vocabulary continues the reply (nor ends it) here");
    sampler_.accept(tok);
    unevaluated_ = {tok};
    if (eog_.count(tok)) {
      r.ended = true;
      break;
    }
    const std::string text = detok_.push(tok);
    write(text);
    r.text += text;
    ++generated_;
    // A stop string the new text completes (anywhere in it: a token may carry more after it).
    if (!text.empty() && std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
          const size_t from = r.text.size() >= text.size() + s.size() ? r.text.size() - text.size() - s.size() + 1 : 0;
          return !s.empty() && r.text.find(s, from) != std::string::npos;
        })) {
      r.stopped = true;
      break;
    }
    if (++n == n_predict) break;
    if (matcher && matcher->finished()) {
      r.ended = true;
      break;
    }
    if (ctx_.n_past() >= ctx_.n_ctx()) {
      r.ctx_full = true;
      break;
    }
    ctx_.eval(unevaluated_, &logits_);
    unevaluated_.clear();
  }
  const std::string rest = detok_.flush();
  write(rest);
  r.text += rest;
  gen_s_ += seconds_since(t0);
  return r;
}

}  // namespace slake::cli
