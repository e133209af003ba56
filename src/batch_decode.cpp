#include "slake/batch_decode.h"

#include <algorithm>
#include <set>
#include <string>

#include "slake/kv/attention.h"
#include "slake/error.h"
#include "slake/cpu/ops.h"
#include "slake/model/softcap.h"
#include "cpu/cpu_layer_ops.h"

namespace slake {

namespace {

// out = x W^T for `n` stacked rows, in groups of at most kMatmulExactRows (see batch_decode.h).
void matmul_rows(float* out, const float* x, int64_t n, const TensorView& W, ThreadPool& pool) {
  const int64_t K = W.row_len(), N = W.n_rows();
  for (int64_t r = 0; r < n; r += kMatmulExactRows)
    matmul(out + r * N, x + r * K, std::min(kMatmulExactRows, n - r), W, pool);
}

void check_batch(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens) {
  if (ctxs.empty()) fail("decode_batch: no sequences");
  if (ctxs.size() != tokens.size())
    fail("decode_batch: " + std::to_string(ctxs.size()) + " contexts but " + std::to_string(tokens.size()) + " tokens");
  std::set<const Context*> seen;
  for (size_t i = 0; i < ctxs.size(); ++i) {
    const Context* c = ctxs[i];
    if (!c) fail("decode_batch: context " + std::to_string(i) + " is null");
    if (!seen.insert(c).second) fail("decode_batch: context " + std::to_string(i) + " appears twice");
    if (&c->model() != &ctxs[0]->model()) fail("decode_batch: the contexts do not share one model");
    if (&const_cast<Context*>(c)->pool() != &ctxs[0]->pool()) fail("decode_batch: the contexts do not share one thread pool");
    if (c->n_past() == 0) fail("decode_batch: context " + std::to_string(i) + " holds no prompt yet");
    if (c->n_past() + 1 > c->n_ctx())
      fail("context full: sequence " + std::to_string(i) + " holds " + std::to_string(c->n_past()) +
           " tokens, the context size");
    const int32_t t = tokens[i];
    if (t < 0 || t >= c->model().cfg.n_vocab)
      fail("token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c->model().cfg.n_vocab));
  }
}

}  // namespace

void decode_batch(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens,
                  std::vector<std::vector<float>>* logits) {
  check_batch(ctxs, tokens);
  Context& c0 = *ctxs[0];
  const Model& model = c0.model_;
  const CpuWeights& weights = c0.weights_;
  const ModelConfig& c = model.cfg;
  ThreadPool& pool = *c0.pool_;
  const int64_t n = static_cast<int64_t>(ctxs.size());
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.ffn_dim;

  std::vector<float> x(static_cast<size_t>(n * dim)), xb(static_cast<size_t>(n * dim));
  std::vector<float> q(static_cast<size_t>(n * qd)), k(static_cast<size_t>(n * kvd)), v(static_cast<size_t>(n * kvd));
  std::vector<float> att(static_cast<size_t>(n * qd));
  std::vector<float> gate(static_cast<size_t>(n * ff)), up(static_cast<size_t>(n * ff));
  std::vector<int32_t> pos(static_cast<size_t>(n));
  embed_tokens(x.data(), model, tokens.data(), n);
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = ctxs[static_cast<size_t>(i)]->n_past_;
  const CpuActs acts{x.data(), xb.data(), q.data(), k.data(), v.data(), att.data(), gate.data(), up.data()};

  for (int l = 0; l < c.n_layers; ++l) {
    // Row i is sequence i's token: its KV hooks and attention run on its own context, as
    // Context::run_layer runs them for one decoded token.
    auto attend = [&](float* att_rows, float* q_rows, float* k_rows, float* v_rows) {
      for (int64_t i = 0; i < n; ++i) {
        Context& s = *ctxs[static_cast<size_t>(i)];
        const int32_t p = pos[static_cast<size_t>(i)];
        float* qi = q_rows + i * qd;
        s.kv_.append(l, k_rows + i * kvd, v_rows + i * kvd, p);
        s.evictor_.on_decode(l, qi, p, s.kv_, pool);
        const std::vector<DecodeRowScores>* scored = s.evictor_.decode_row_scores(l);
        const AttentionShape shape = s.layer_shape(l);
        if (scored)
          attention_decode(att_rows + i * qd, qi, p, s.kv_, l, shape, *scored, pool);
        else
          attention_prefill(att_rows + i * qd, qi, &p, 1, s.kv_, l, shape, pool, true);
        if (c.layer_local(l)) s.kv_.drop_before(l, c.local_first_visible(p));  // as Context::run_layer
        s.kv_.settle(l);
      }
    };
    CpuLayerOps ops(c, l, weights.layers[static_cast<size_t>(l)], acts, n, pos.data(), c0.rope_, kMatmulExactRows, pool, attend);
    run_layer(c, ops);
  }
  for (Context* s : ctxs) s->n_past_ += 1;

  if (!logits) return;
  rmsnorm_rows(xb.data(), x.data(), model.output_norm, n, dim, c.rms_eps, pool);
  std::vector<float> all(static_cast<size_t>(n) * c.n_vocab);
  matmul_rows(all.data(), xb.data(), n, weights.output, pool);
  soft_cap_all(all.data(), all.size(), c.final_softcap);
  logits->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    (*logits)[static_cast<size_t>(i)].assign(all.begin() + i * c.n_vocab, all.begin() + (i + 1) * c.n_vocab);
}

void prefill_shared(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  if (ctxs.empty()) fail("prefill_shared: no contexts");
  std::set<const Context*> seen;
  const Context& c0 = *ctxs[0];
  for (size_t i = 0; i < ctxs.size(); ++i) {
    Context* c = ctxs[i];
    if (!c) fail("prefill_shared: context " + std::to_string(i) + " is null");
    if (!seen.insert(c).second) fail("prefill_shared: context " + std::to_string(i) + " appears twice");
    if (&c->model() != &c0.model()) fail("prefill_shared: the contexts do not share one model");
    if (&c->pool() != c0.pool_) fail("prefill_shared: the contexts do not share one thread pool");
    if (c->n_past() != 0) fail("prefill_shared: context " + std::to_string(i) + " already holds tokens");
    if (c->kv_.type_k() != c0.kv_.type_k() || c->kv_.type_v() != c0.kv_.type_v())
      fail("prefill_shared: context " + std::to_string(i) + " stores another cache type");
    if (c->params_.n_batch != c0.params_.n_batch) fail("prefill_shared: context " + std::to_string(i) + " has another n_batch");
    if (static_cast<int>(tokens.size()) > c->n_ctx())
      fail("context full: a prompt of " + std::to_string(tokens.size()) + " tokens exceeds context " + std::to_string(i) +
           "'s size " + std::to_string(c->n_ctx()));
  }
  ctxs[0]->eval_into(tokens, logits, false, std::vector<Context*>(ctxs.begin() + 1, ctxs.end()));
}

}  // namespace slake
