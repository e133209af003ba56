#include "slake/context.h"

#include <algorithm>
#include <unistd.h>

#include <cstring>

#include "slake/kv/attention.h"
#include "slake/error.h"
#include "slake/cpu/ops.h"
#include "slake/model/softcap.h"
#include "cpu/cpu_layer_ops.h"

namespace slake {

namespace {
int resolve_ctx(const Model& m, int n_ctx, const KvPolicyParams& kv) {
  if (n_ctx < 0) fail("context size must not be negative, got " + std::to_string(n_ctx));
  if (n_ctx == 0) n_ctx = m.cfg.n_ctx_train;
  const ModelConfig& c = m.cfg;
  check_kv_type(kv.type_k, c.head_dim, "--cache-type-k");
  check_kv_type(kv.type_v, c.head_dim, "--cache-type-v");
  const size_t need = KvCache::planned_bytes(c.n_layers, c.n_kv_heads, c.head_dim, n_ctx, kv.type_k, kv.type_v);
  const size_t have = static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGE_SIZE));
  if (need > have)
    fail("a context of " + std::to_string(n_ctx) + " tokens needs " + std::to_string(need >> 20) +
         " MiB of KV cache, more than this machine's " + std::to_string(have >> 20) + " MiB of memory; lower the context size");
  return n_ctx;
}
}  // namespace

Context::Context(const Model& model, const ContextParams& params)
    : model_(model),
      weights_(cpu_weights(model)),
      params_(params),
      n_ctx_(resolve_ctx(model, params.n_ctx, params.kv)),
      own_pool_(params.pool ? nullptr
                            : std::make_unique<ThreadPool>(params.n_threads > 0 ? params.n_threads : default_thread_count())),
      pool_(params.pool ? params.pool : own_pool_.get()),
      rope_(model.cfg, n_ctx_),
      shape_{model.cfg.n_heads, model.cfg.n_kv_heads, model.cfg.head_dim, model.cfg.sliding_window, model.cfg.attn_softcap},
      kv_(model.cfg.n_layers, model.cfg.n_kv_heads, model.cfg.head_dim, n_ctx_, params.kv.centroid_count(), params.kv.type_k,
          params.kv.type_v, params.kv.recall()),
      evictor_(resolve_kv_policy(params.kv, false, &model.cfg), model.cfg.kv_policy_layers(), shape_) {
  if (params_.n_batch < 1) fail("batch size must be positive, got " + std::to_string(params_.n_batch));
  const ModelConfig& c = model.cfg;
  const size_t B = static_cast<size_t>(params_.n_batch);
  xb_.resize(B * c.dim);
  q_.resize(B * c.q_dim());
  k_.resize(B * c.kv_dim());
  v_.resize(B * c.kv_dim());
  att_.resize(B * c.q_dim());
  gate_.resize(B * c.ffn_dim);
  up_.resize(B * c.ffn_dim);
}

AttentionShape Context::layer_shape(int l) const {
  AttentionShape s = shape_;
  s.sliding_window = model_.cfg.layer_window(l);
  return s;
}

void Context::reset() {
  kv_.clear();
  evictor_.reset();
  n_past_ = 0;
}

namespace {
void check_same_shape(const Model* a, const Model* b, int ctx_a, int ctx_b, const KvPolicyParams& kv_a,
                      const KvPolicyParams& kv_b, int batch_a, int batch_b) {
  if (a != b) fail("copy_state_from: the contexts do not share one model");
  if (ctx_a != ctx_b || kv_a != kv_b || batch_a != batch_b)
    fail("copy_state_from: the contexts differ in size, KV policy or batch size");
}
}  // namespace

void Context::copy_state_from(const Context& o) {
  if (&o == this) return;
  check_same_shape(&o.model_, &model_, o.n_ctx_, n_ctx_, o.params_.kv, params_.kv, o.params_.n_batch, params_.n_batch);
  // Copy assignment keeps the storage each head reserved up front (same shape, same capacity).
  kv_ = o.kv_;
  evictor_ = o.evictor_;
  n_past_ = o.n_past_;
}

std::shared_ptr<const ContextState> Context::save_state() const {
  return std::make_shared<const ContextState>(ContextState{kv_, evictor_, n_past_, &model_, n_ctx_, params_.n_batch, params_.kv});
}

std::shared_ptr<ContextState> Context::empty_state() const {
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& kv = params_.kv;
  return std::make_shared<ContextState>(ContextState{
      KvCache(c.n_layers, c.n_kv_heads, c.head_dim, 0, kv.centroid_count(), kv.type_k, kv.type_v, kv.recall()),
      KvEvictor(resolve_kv_policy(kv, false, &c), c.kv_policy_layers(), shape_), 0, &model_, n_ctx_, params_.n_batch, kv});
}

void Context::restore_state(const ContextState& s) {
  check_same_shape(s.model, &model_, s.n_ctx, n_ctx_, s.params, params_.kv, s.n_batch, params_.n_batch);
  kv_ = s.kv;
  evictor_ = s.evictor;
  n_past_ = s.n_past;
}

bool Context::truncate(int n) {
  if (n > n_past_ || params_.kv.evicts() || !kv_.truncate(n)) return false;
  n_past_ = n;
  return true;
}

void Context::run_layer(int l, float* x, int n, const int32_t* pos, bool prompt, const std::vector<Context*>& also) {
  const ModelConfig& c = model_.cfg;
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim();
  for (int t0 = 0; t0 < n; t0 += params_.n_batch) {
    const int nb = std::min(params_.n_batch, n - t0);
    const int32_t* p = pos + t0;
    // The KV hooks: each token's key and value into this cache (and the shared prompt's other
    // caches), the policy's observation (prompt) or eviction (decode), then attention.
    auto attend = [&](float* att, float* q, float* k, float* v) {
      for (int t = 0; t < nb; ++t) {
        kv_.append(l, k + t * kvd, v + t * kvd, p[t]);
        for (Context* o : also) o->kv_.append(l, k + t * kvd, v + t * kvd, p[t]);
        if (!prompt) evictor_.on_decode(l, q + t * qd, p[t], kv_, *pool_);
      }
      if (prompt) {
        evictor_.observe(l, q, p, nb, kv_, *pool_);
        for (Context* o : also) o->evictor_.observe(l, q, p, nb, o->kv_, *pool_);
      }
      // A decode step of a policy that scored this token for eviction reuses those scores.
      const std::vector<DecodeRowScores>* scored = prompt || nb != 1 ? nullptr : evictor_.decode_row_scores(l);
      const AttentionShape s = layer_shape(l);
      if (scored)
        attention_decode(att, q, p[0], kv_, l, s, *scored, *pool_);
      else
        attention_prefill(att, q, p, nb, kv_, l, s, *pool_, !prompt && nb == 1);
      if (c.layer_local(l)) {  // what no later query can see leaves a local layer
        const int32_t min_pos = c.local_first_visible(p[nb - 1]);
        kv_.drop_before(l, min_pos);
        for (Context* o : also) o->kv_.drop_before(l, min_pos);
      }
    };
    const CpuActs acts{x + static_cast<int64_t>(t0) * dim, xb_.data(), q_.data(), k_.data(), v_.data(), att_.data(), gate_.data(),
                       up_.data()};
    CpuLayerOps ops(c, l, weights_.layers[static_cast<size_t>(l)], acts, nb, p, rope_, nb, *pool_, attend);
    slake::run_layer(c, ops);
  }
}

void Context::eval(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits) {
  eval_into(tokens, logits, all_logits, {});
}

void Context::hidden_states(const std::vector<int32_t>& tokens, std::vector<float>* out) {
  reset();
  eval_into(tokens, nullptr, true, {}, out);
}

void Context::eval_into(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits,
                        const std::vector<Context*>& also, std::vector<float>* hidden) {
  check_eval_tokens(model_.cfg, tokens, n_past_, n_ctx_);
  const int n = static_cast<int>(tokens.size());

  // A prompt evaluated into an empty cache is where prefill eviction happens; tokens added later
  // are decoded one at a time when the policy evicts, so each one is scored and evicted as such.
  const bool prompt = n_past_ == 0;
  if (!prompt && !also.empty()) fail("prefill_shared: the first context already holds tokens");
  if (!prompt && n > 1 && evictor_.evicts_in_decode()) {
    eval_one_at_a_time(tokens, logits, all_logits, [&](int32_t t, std::vector<float>* l) { eval({t}, l); });
    return;
  }
  // Chunked prefill (KvPolicyParams::prefill_chunk): the prompt goes through every layer a chunk at
  // a time, each chunk a prompt of its own into what the chunks before it kept. Contexts sharing a
  // prompt then hold different caches after the first chunk, so each takes the prompt alone.
  auto chunked = [&](const Context& o) { return o.params_.kv.prefill_chunk > 0 && n > o.params_.kv.prefill_chunk && o.params_.kv.evicts(); };
  if (prompt && !hidden && (chunked(*this) || std::any_of(also.begin(), also.end(), [&](const Context* o) { return chunked(*o); }))) {
    for (Context* o : also) o->eval_into(tokens, nullptr, false, {});
    if (!chunked(*this)) {
      eval_into(tokens, logits, all_logits, {});
      return;
    }
    eval_in_chunks(evictor_.params(), tokens, logits, all_logits,
                   [&](const std::vector<int32_t>& t, std::vector<float>* l) { eval_rows(t, l, all_logits, {}, nullptr, true); });
    return;
  }
  eval_rows(tokens, logits, all_logits, also, hidden, prompt);
}

void check_eval_tokens(const ModelConfig& c, const std::vector<int32_t>& tokens, int n_past, int n_ctx) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) fail("eval: no tokens");
  if (n_past + n > n_ctx)
    fail("context full: " + std::to_string(n_past) + " + " + std::to_string(n) + " tokens exceed the context size " +
         std::to_string(n_ctx));
  for (int32_t t : tokens)
    if (t < 0 || t >= c.n_vocab) fail("token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c.n_vocab));
}

void check_prompt_chunk(const KvPolicyParams& p, int n_past, int n) {
  if (n_past > 0 && (!p.evicts() || n < p.window))
    fail("eval_prompt_chunk: a chunk after the first needs an evicting policy and at least a window (" +
         std::to_string(p.window) + ") of tokens, got " + std::to_string(n));
}

void Context::eval_prompt_chunk(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  check_eval_tokens(model_.cfg, tokens, n_past_, n_ctx_);
  check_prompt_chunk(evictor_.params(), n_past_, static_cast<int>(tokens.size()));
  eval_rows(tokens, logits, false, {}, nullptr, true);
}

void Context::eval_rows(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits,
                        const std::vector<Context*>& also, std::vector<float>* hidden, bool prompt) {
  const ModelConfig& c = model_.cfg;
  const int n = static_cast<int>(tokens.size());
  const int64_t dim = c.dim;
  std::vector<float> x(static_cast<size_t>(n) * dim);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  embed_tokens(x.data(), model_, tokens.data(), n);
  for (int t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = n_past_ + t;
  std::vector<Context*> all{this};  // every context this prompt goes into
  all.insert(all.end(), also.begin(), also.end());
  if (prompt)  // the positions so far: a chunk of a chunked prefill comes after the ones before it
    for (Context* o : all) o->evictor_.begin_prompt(o->n_past_ + n, o->n_past_ > 0);
  for (int l = 0; l < c.n_layers; ++l) {
    run_layer(l, x.data(), n, pos.data(), prompt, also);
    for (Context* o : all) {
      if (prompt) o->evictor_.on_layer_done(l, o->kv_, *pool_);
      o->kv_.settle(l);  // KIVI groups form from what the layer's eviction kept
    }
  }
  for (Context* o : all) {
    if (prompt) o->evictor_.finish(o->kv_);
    o->n_past_ += n;
  }

  if (!logits && !hidden) return;
  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  std::vector<float> normed(static_cast<size_t>(rows) * dim);
  rmsnorm_rows(normed.data(), x.data() + first * dim, model_.output_norm, rows, dim, c.rms_eps, *pool_);
  if (hidden) {
    *hidden = std::move(normed);
    return;
  }
  logits->resize(static_cast<size_t>(rows) * c.n_vocab);
  matmul(logits->data(), normed.data(), rows, weights_.output, *pool_);
  soft_cap_all(logits->data(), logits->size(), c.final_softcap);
}

}  // namespace slake
