#include "slot.h"

#include "../common/dry_breakers.h"
#include "../common/end_of_generation.h"
#include "../common/logit_bias.h"
#include "slake/error.h"
#include "slake/state_file.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace slake::server {

namespace {

// The longest suffix of `text` that is the start of some stop string (and so may still become one).
size_t stop_prefix_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t keep = 0;
  for (const std::string& s : stops)
    for (size_t n = std::min(text.size(), s.size() - 1); n > keep; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  return keep;
}

}  // namespace

Slot::Slot(int id, const Model& model, const Tokenizer& tokenizer, const std::unordered_set<int32_t>& eog,
           GrammarVocabSource& grammar_vocab, int n_ctx, ThreadPool& pool, const KvPolicyParams& kv, const std::string& backend,
           PromptCache& prompt_cache)
    : id_(id), model_(model), tokenizer_(tokenizer), eog_(eog), grammar_vocab_(grammar_vocab), prompt_cache_(prompt_cache),
      n_ctx_(n_ctx), pool_(pool),
      backend_(backend), kv_(kv) {
  ctx_ = make_session(kv);
}

std::unique_ptr<Session> Slot::make_session(const KvPolicyParams& kv) {
  ContextParams p;
  p.n_ctx = n_ctx_;
  p.kv = kv;
  p.pool = &pool_;
  return tools::make_session(backend_, model_, p);
}

void Slot::use_policy(const KvPolicyParams& kv) {
  if (kv == kv_) return;
  ctx_.reset();  // the old cache goes before the new one is reserved
  try {
    ctx_ = make_session(kv);
  } catch (...) {  // a policy this backend lacks (cuda: h2o), or no memory: an empty slot of its old policy
    ctx_ = make_session(kv_);
    history_.clear();
    throw;
  }
  kv_ = kv;
}

int Slot::shareable(const GenRequest& r) const {
  if (kv_ != r.kv || history_.empty() || !ctx_->can_truncate()) return 0;
  return cut_prefix(history_, r.prompt);
}

int Slot::reusable(const GenRequest& r) const {
  if (kv_ != r.kv || history_.empty()) return 0;
  return usable_prefix(history_, r.prompt, ctx_->can_truncate());
}


void Slot::drop_cache() {
  ctx_->reset();
  history_.clear();
}

void Slot::start(std::shared_ptr<Task> task, size_t planned, uint64_t now, const PrefixSource& from) {
  const GenRequest& r = task->req;
  // What can fail is made first: a throw leaves the slot idle, not holding a task that was refused.
  auto sampler = std::make_unique<Sampler>(r.sampling);
  if (r.sampling.dry_multiplier > 0.0f) sampler->set_dry_breakers(tools::dry_breaker_tokens(tokenizer_, r.dry_sequence_breakers));
  std::unique_ptr<GrammarMatcher> matcher;
  if (r.grammar) matcher = std::make_unique<GrammarMatcher>(r.grammar, grammar_vocab_.get());
  int reuse = reusable(r);
  const bool take = from.usable > reuse;
  // What is not kept whole goes to the prompt cache (a later request may want it back), once the
  // source is read: putting may drop saved prompts, the source among them.
  std::shared_ptr<const ContextState> mine;
  std::vector<int32_t> mine_tokens;
  std::vector<float> first_logits;  // a saved prompt taken whole: its logits
  const bool cut_mine = ctx_->can_truncate();
  if ((take || static_cast<size_t>(reuse) < history_.size()) && prompt_cache_.on() &&
      static_cast<int>(history_.size()) > kReevaluate) {
    mine = ctx_->save_state();
    mine_tokens = history_;
  }
  if (take) {
    use_policy(r.kv);
    try {
      const bool loaded = from.live ? ctx_->copy_state_from(*from.live) : ctx_->restore_state(*from.saved->state);
      history_ = loaded ? *from.tokens : std::vector<int32_t>();
      reuse = loaded ? from.usable : 0;
      if (!loaded) drop_cache();
      if (loaded && from.saved && static_cast<size_t>(reuse) == r.prompt.size()) first_logits = from.saved->logits;
    } catch (...) {  // a half-copied cache: the slot is left empty
      drop_cache();
      throw;
    }
  }
  if (mine) prompt_cache_.put(std::move(mine_tokens), std::move(mine), cut_mine, now);
  if (reuse > 0 && static_cast<size_t>(reuse) < history_.size()) {
    if (ctx_->truncate(reuse)) {
      history_.resize(static_cast<size_t>(reuse));
    } else {
      reuse = 0;
    }
  }
  if (reuse == 0) {
    use_policy(r.kv);
    drop_cache();
  }
  task_ = std::move(task);
  planned_ = planned;
  last_used_ = now;
  next_prefill_ = static_cast<size_t>(reuse);
  n_cached_ = reuse;
  // A prompt into an empty cache under a chunked prefill goes a chunk per scheduler step.
  chunked_ = reuse == 0 && kv_.evicts() && kv_.prefill_chunk > 0;
  sampler_ = std::move(sampler);
  for (const int32_t t : r.prompt) sampler_->accept(t);  // as slake-cli: the penalty sees the prompt
  detok_ = std::make_unique<StreamingDetokenizer>(tokenizer_);
  matcher_ = std::move(matcher);
  logits_ = std::move(first_logits);
  sample_first_ = !logits_.empty();
  prompt_logits_.clear();
  awaiting_ = !task_->req.prefill_leader.expired();
  pending_ = -1;
  n_gen_ = 0;
  held_.clear();
  done_ = false;
}

int Slot::prefill(int chunk) {
  const std::vector<int32_t>& p = task_->req.prompt;
  if (next_prefill_ == static_cast<size_t>(n_cached_)) t_start_ = std::chrono::steady_clock::now();
  if (sample_first_) {  // the whole prompt came from a saved one, with its logits
    sample_first_ = false;
    if (task_->req.keeps_prompt) prompt_logits_ = logits_;
    sample_and_emit();
    return 0;
  }
  const size_t rest = p.size() - next_prefill_;
  // A prompt into an empty cache of an evicting policy is scored and evicted as a whole, or in the
  // policy's own chunks (--prefill-chunk), each evicted before the next, as slake-cli takes them.
  const bool whole = ctx_->n_past() == 0 && kv_.evicts();
  const size_t n = chunked_ ? static_cast<size_t>(prefill_chunk_length(kv_, static_cast<int>(next_prefill_), static_cast<int>(p.size())))
                   : whole  ? rest
                            // on the grid of chunks a fresh prefill takes: after a reused prefix,
                            // the prompt's last chunk is the same as a fresh request's
                            : std::min(rest, static_cast<size_t>(chunk) - next_prefill_ % static_cast<size_t>(chunk));
  const std::vector<int32_t> tokens(p.begin() + static_cast<std::ptrdiff_t>(next_prefill_),
                                    p.begin() + static_cast<std::ptrdiff_t>(next_prefill_ + n));
  const bool last = next_prefill_ + n == p.size();
  if (chunked_)
    ctx_->eval_prompt_chunk(tokens, last ? &logits_ : nullptr);
  else
    ctx_->eval(tokens, last ? &logits_ : nullptr);
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  next_prefill_ += n;
  if (last && task_->req.keeps_prompt) prompt_logits_ = logits_;
  // An evicting policy's compressed prompt serves only an identical prompt (nothing can be cut
  // from it): saved with its logits, a regenerated reply takes it whole.
  if (last && n_cached_ == 0 && kv_.evicts() && prompt_cache_.on() && static_cast<int>(p.size()) > kReevaluate)
    if (auto state = ctx_->save_state()) prompt_cache_.put(history_, std::move(state), false, last_used_, logits_);
  if (last) sample_and_emit();
  return static_cast<int>(n);
}

bool Slot::prompt_shareable() const {
  return busy() && !prefilling() && !prompt_logits_.empty() && history_.size() == task_->req.prompt.size();
}

int Slot::share_prompt_of(const Slot& leader) {
  awaiting_ = false;
  sample_first_ = false;
  if (!ctx_->copy_state_from(*leader.ctx_)) return 0;
  const int had = n_cached_;
  history_ = leader.history_;
  next_prefill_ = history_.size();
  n_cached_ = static_cast<int>(history_.size());
  chunked_ = false;
  t_start_ = std::chrono::steady_clock::now();
  logits_ = leader.prompt_logits_;
  sample_and_emit();
  return n_cached_ - had;
}

void Slot::decoded(const std::vector<float>& logits) {
  history_.push_back(pending_);
  pending_ = -1;
  logits_ = logits;
  sample_and_emit();
}

TokenLogprob Slot::logprob_of(int32_t token) const {
  const int n = static_cast<int>(logits_.size());
  const float mx = *std::max_element(logits_.begin(), logits_.end());
  double sum = 0;
  for (const float l : logits_) sum += std::exp(static_cast<double>(l - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.id = token;
  out.logprob = logits_[static_cast<size_t>(token)] - lse;
  const int k = std::min(task_->req.top_logprobs, n);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits_[static_cast<size_t>(a)] > logits_[static_cast<size_t>(b)] ||
             (logits_[static_cast<size_t>(a)] == logits_[static_cast<size_t>(b)] && a < b);
    });
    for (int i = 0; i < k; ++i) out.top.emplace_back(ids[static_cast<size_t>(i)], logits_[static_cast<size_t>(ids[static_cast<size_t>(i)])] - lse);
  }
  return out;
}

void Slot::sample_and_emit() {
  const GenRequest& r = task_->req;
  if (n_gen_ == 0) t_first_ = std::chrono::steady_clock::now();
  if (r.max_tokens == 0) {
    finish("length");
    return;
  }
  tools::apply_logit_bias(logits_.data(), r.logit_bias);
  if (r.ignore_eos) tools::ban_end_of_generation(logits_.data(), eog_, matcher_ && matcher_->accepting());
  // Under a grammar, only tokens that keep the reply inside it (and an end token once it is whole);
  // with logprobs asked for, the mask comes first, so that they are the masked distribution's.
  const int32_t tok = matcher_ ? sample_with_grammar(*sampler_, *matcher_, logits_.data(), model_.cfg.n_vocab, r.top_logprobs >= 0)
                               : sampler_->sample(logits_.data(), model_.cfg.n_vocab);
  if (tok < 0) {
    task_->finish("", static_cast<int>(r.prompt.size()), n_cached_, n_gen_,
                  "grammar: no token of the vocabulary continues the reply (nor ends it) here");
    done_ = true;
    pending_ = -1;
    return;
  }
  sampler_->accept(tok);
  Piece piece;
  if (eog_.count(tok)) {
    piece.text = held_ + detok_->flush();
    held_.clear();
    if (!piece.text.empty()) task_->push(std::move(piece));
    finish("stop");
    return;
  }
  ++n_gen_;
  piece.ids.push_back(tok);
  if (r.top_logprobs >= 0) piece.tokens.push_back(logprob_of(tok));
  held_ += detok_->push(tok);
  size_t cut = std::string::npos;
  const std::string* word = nullptr;
  for (const std::string& s : r.stop)
    if (const size_t at = held_.find(s); at < cut) cut = at, word = &s;
  if (cut != std::string::npos) {
    piece.text = held_.substr(0, cut);
    held_.clear();
    task_->push(std::move(piece));
    task_->set_stop_word(*word);
    finish("stop");
    return;
  }
  if (matcher_ && matcher_->finished()) {  // the grammar is matched whole and nothing may follow
    piece.text = held_ + detok_->flush();
    held_.clear();
    task_->push(std::move(piece));
    finish("stop");
    return;
  }
  if (n_gen_ == r.max_tokens || ctx_->n_past() >= n_ctx_) {
    piece.text = held_ + detok_->flush();
    held_.clear();
    task_->push(std::move(piece));
    finish("length");
    return;
  }
  const size_t keep = stop_prefix_suffix(held_, r.stop);
  piece.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  // Pushed even when its text is held back (a stop string's prefix, part of a UTF-8 character): the
  // token's id still belongs to the reply (return_tokens, the native stream's token count).
  task_->push(std::move(piece));
  pending_ = tok;
}

void Slot::finish(const std::string& reason) {
  const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  task_->set_timings(ms(t_start_, t_first_), ms(t_first_, std::chrono::steady_clock::now()));
  done_ = true;
  pending_ = -1;
  task_->finish(reason, static_cast<int>(task_->req.prompt.size()), n_cached_, n_gen_);
}

std::string Slot::save_file() const {
  const std::shared_ptr<const ContextState> st = ctx_->save_state();
  if (!st) slake::fail("saving a slot needs the cpu backend");
  if (history_.empty()) slake::fail("slot " + std::to_string(id_) + " holds nothing to save");
  return write_state_file(*st, history_, model_fingerprint(model_));
}

int Slot::restore_file(const std::string& bytes) {
  const StateFileHead head = read_state_head(bytes);
  if (head.model != model_fingerprint(model_)) slake::fail("the file was saved with another model");
  if (!can_load()) slake::fail("restoring a slot needs the cpu backend");
  KvPolicyParams kv = head.params;  // the file's policy, as the request that made it had,
  kv.store_file = kv_.store_file;   // its store where this server keeps stores (not in the file)
  use_policy(kv);
  try {
    std::vector<int32_t> tokens;
    const auto st = read_state_file(bytes, *ctx_->cpu_context(), &tokens);
    ctx_->restore_state(*st);
    history_ = std::move(tokens);
  } catch (...) {
    drop_cache();
    throw;
  }
  return static_cast<int>(history_.size());
}

int Slot::erase() {
  const int n = static_cast<int>(history_.size());
  drop_cache();
  return n;
}

void Slot::release() {
  if (task_ && !done_) task_->finish("", static_cast<int>(task_->req.prompt.size()), n_cached_, n_gen_, "cancelled");
  // A chunked prefill cut off between chunks leaves a cache that only eval_prompt_chunk may extend;
  // a later request reusing it would decode the rest of its prompt a token at a time.
  if (task_ && chunked_ && prefilling()) drop_cache();
  task_.reset();
  sampler_.reset();
  detok_.reset();
  matcher_.reset();
  pending_ = -1;
  done_ = false;
}

void Slot::fail(const std::string& error) {
  if (task_ && !done_) task_->finish("", static_cast<int>(task_->req.prompt.size()), n_cached_, n_gen_, error);
  done_ = true;
  release();
  drop_cache();
}

}  // namespace slake::server
