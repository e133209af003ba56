#include "cpu/cpu_layer_ops.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "slake/cpu/ops.h"
#include "slake/error.h"
#include "slake/model/moe.h"

namespace slake {

float* CpuLayerOps::ptr(Act a) const {
  switch (a) {
    case Act::X: return a_.x;
    case Act::XB: return a_.xb;
    case Act::Q: return a_.q;
    case Act::K: return a_.k;
    case Act::V: return a_.v;
    case Act::Att: return a_.att;
    case Act::Gate: return a_.gate;
    case Act::Up: return a_.up;
  }
  fail("internal: unknown activation");
}

const TensorView& CpuLayerOps::weight(Weight w) const {
  const TensorView& t = find_weight(w);
  if (!t.data) fail("internal: the layer definition reads a weight the model does not have");
  return t;
}

const TensorView& CpuLayerOps::find_weight(Weight w) const {
  switch (w) {
    case Weight::AttnNorm: return w_.attn_norm;
    case Weight::Wq: return w_.wq;
    case Weight::Wk: return w_.wk;
    case Weight::Wv: return w_.wv;
    case Weight::Wo: return w_.wo;
    case Weight::FfnNorm: return w_.ffn_norm;
    case Weight::Gate: return w_.w_gate;
    case Weight::Up: return w_.w_up;
    case Weight::Down: return w_.w_down;
    case Weight::Bq: return w_.bq;
    case Weight::Bk: return w_.bk;
    case Weight::Bv: return w_.bv;
    case Weight::QNorm: return w_.q_norm;
    case Weight::KNorm: return w_.k_norm;
    case Weight::AttnPostNorm: return w_.attn_post_norm;
    case Weight::FfnPostNorm: return w_.ffn_post_norm;
  }
  fail("internal: unknown weight");
}

void CpuLayerOps::rmsnorm(Act out, Act in, Weight w, float eps) {
  rmsnorm_rows(ptr(out), ptr(in), weight(w), n_, act_width(c_, in), eps, pool_);
}

void CpuLayerOps::matmul(Act out, Act in, Weight w) { rows_times(ptr(out), ptr(in), n_, weight(w)); }

void CpuLayerOps::rows_times(float* out, const float* in, int64_t n, const TensorView& W) {
  const int64_t K = W.row_len(), N = W.n_rows();
  for (int64_t r = 0; r < n; r += matmul_rows_) slake::matmul(out + r * N, in + r * K, std::min(matmul_rows_, n - r), W, pool_);
}

void CpuLayerOps::moe_ffn(Act x, Act in) {
  const int E = c_.n_expert, K = c_.n_expert_used;
  const int64_t dim = act_width(c_, in);
  if (w_.exp_gate.size() != static_cast<size_t>(E) || !w_.router.data) fail("internal: the layer has no experts");
  const float* src = ptr(in);
  std::vector<float> logits(static_cast<size_t>(n_ * E));
  rows_times(logits.data(), src, n_, w_.router);
  // Each expert's rows and their weights, in row order.
  using Rows = std::vector<std::pair<int64_t, float>>;
  std::vector<Rows> rows(static_cast<size_t>(E));
  std::vector<ExpertChoice> choice(static_cast<size_t>(K));
  for (int64_t t = 0; t < n_; ++t) {
    moe_route(logits.data() + t * E, E, K, c_.expert_norm, choice.data());
    for (const ExpertChoice& ch : choice) rows[static_cast<size_t>(ch.expert)].push_back({t, ch.weight});
  }
  std::vector<float> acc(static_cast<size_t>(n_ * dim), 0.0f), xin, g, u, y;
  // y = down(silu(gate(xr)) * up(xr)) for m rows xr, through a hidden layer `width` wide; then
  // acc[row] += weight * y[i] for the i-th (row, weight) of r.
  auto ffn_into_acc = [&](const float* xr, int64_t m, int64_t width, const TensorView& wg, const TensorView& wu,
                          const TensorView& wd, const Rows& r) {
    g.resize(static_cast<size_t>(m * width));
    u.resize(g.size());
    y.resize(static_cast<size_t>(m * dim));
    rows_times(g.data(), xr, m, wg);
    rows_times(u.data(), xr, m, wu);
    slake::swiglu(g.data(), g.data(), u.data(), m * width);
    rows_times(y.data(), g.data(), m, wd);
    for (int64_t i = 0; i < m; ++i) {
      float* a = acc.data() + r[static_cast<size_t>(i)].first * dim;
      const float wt = r[static_cast<size_t>(i)].second;
      for (int64_t j = 0; j < dim; ++j) a[j] += wt * y[static_cast<size_t>(i * dim + j)];
    }
  };
  for (int e = 0; e < E; ++e) {
    const Rows& r = rows[static_cast<size_t>(e)];
    const int64_t m = static_cast<int64_t>(r.size());
    if (m == 0) continue;
    xin.resize(static_cast<size_t>(m * dim));
    for (int64_t i = 0; i < m; ++i) std::copy_n(src + r[static_cast<size_t>(i)].first * dim, dim, xin.data() + i * dim);
    const size_t ei = static_cast<size_t>(e);
    ffn_into_acc(xin.data(), m, c_.ffn_dim, w_.exp_gate[ei], w_.exp_up[ei], w_.exp_down[ei], r);
  }
  if (c_.shared_expert_ffn_dim > 0) {  // every row through the shared expert, in its gate's weight
    std::vector<float> gate(static_cast<size_t>(n_));
    rows_times(gate.data(), src, n_, w_.shexp_router);
    Rows all(static_cast<size_t>(n_));
    for (int64_t t = 0; t < n_; ++t) all[static_cast<size_t>(t)] = {t, shared_expert_weight(gate[static_cast<size_t>(t)])};
    ffn_into_acc(src, n_, c_.shared_expert_ffn_dim, w_.shexp_gate, w_.shexp_up, w_.shexp_down, all);
  }
  float* px = ptr(x);
  for (size_t i = 0; i < acc.size(); ++i) px[i] += acc[i];
}

void CpuLayerOps::add_bias(Act a, Weight b) { add_bias_rows(ptr(a), weight(b), n_, act_width(c_, a)); }

void CpuLayerOps::rmsnorm_heads(Act a, Weight w, int n_heads, float eps) {
  if (act_width(c_, a) != static_cast<int64_t>(n_heads) * c_.head_dim) fail("internal: rmsnorm_heads normalises whole rows of heads");
  float* p = ptr(a);  // the rows are n_ * n_heads consecutive heads
  rmsnorm_rows(p, p, weight(w), n_ * n_heads, c_.head_dim, eps, pool_);
}

void CpuLayerOps::rope(Act a, int n_heads) {
  const int64_t width = act_width(c_, a);
  float* p = ptr(a);
  const bool swa = c_.layer_local(layer_);
  for (int64_t t = 0; t < n_; ++t) rope_.apply(p + t * width, n_heads, pos_[t], swa);
}

void CpuLayerOps::attention(Act out, Act q, Act k, Act v) { attend_(ptr(out), ptr(q), ptr(k), ptr(v)); }

void CpuLayerOps::gated(Act a, Act b, void (*fn)(float*, const float*, const float*, int64_t)) {
  const int64_t width = act_width(c_, a);
  float *pa = ptr(a), *pb = ptr(b);
  pool_.parallel_for(n_, 1, [&](int64_t lo, int64_t hi, int) {
    for (int64_t t = lo; t < hi; ++t) fn(pa + t * width, pa + t * width, pb + t * width, width);
  });
}

void CpuLayerOps::swiglu(Act a, Act b) { gated(a, b, slake::swiglu); }
void CpuLayerOps::geglu(Act a, Act b) { gated(a, b, slake::geglu); }

void CpuLayerOps::add(Act x, Act y) {
  float *px = ptr(x), *py = ptr(y);
  const int64_t n = n_ * act_width(c_, x);
  for (int64_t i = 0; i < n; ++i) px[i] += py[i];
}

}  // namespace slake
