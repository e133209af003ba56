#include "cuda/device_context.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "device_memory.h"
#include "slake/error.h"
#include "slake/kv/kv_budget.h"
#include "slake/cpu/rope.h"
#include "slake/model/layer.h"
#include "slake/model/moe.h"
#include "slake/model/softcap.h"

namespace slake::gpu {

DeviceContext::DeviceContext(const Model& model, const ContextParams& params) : DeviceContext(model, params, nullptr) {}

DeviceContext::DeviceContext(const Model& model, const ContextParams& params, std::shared_ptr<const DeviceWeights> weights)
    : model_(model),
      plan_(model, params, /*with_weights=*/weights == nullptr, /*shared_activations=*/weights != nullptr),
      shared_(std::move(weights)) {
  const KvPolicyParams& p = plan_.kv;
  parts_ = policy_parts(p);
  if (plan_.evicting && (accumulates(p) || uses_sre(p)))
    fail(std::string(p.selector != "auto" ? "--kv-selector " + p.selector : p.sre_mass > 0 ? "--kv-sre-mass" : "--kv-policy " + p.policy) +
         " is not supported by the cuda backend (use the cpu backend)");
  if (plan_.evicting && !p.cascade) fail("the cuda backend evicts after every layer (cascade) only");
  if (plan_.evicting && p.evict_every != 1) fail("the cuda backend evicts one token per decode step (--kv-evict-every 1) only");
  if (plan_.recall) {  // the parts of the recall store the device has (device_context.h)
    const char* cpu_only = p.recall_score != RecallScore::Keys ? "--kv-recall-score other than keys"
                           : p.absorbs()                        ? "--kv-recall-pages with a compensator"
                           : !p.store_file.empty()              ? "--kv-store-file"
                                                                : nullptr;
    if (cpu_only) fail(std::string(cpu_only) + " runs on the cpu backend only (docs/algorithm.md §9)");
  }
  if (!emulated() && device_count() == 0) fail("the cuda backend needs a CUDA device, and none is available");
  // The shared activations first (allocated by the first context of their layout, refused before
  // that when they do not fit), then the arena, refused before it is allocated.
  if (plan_.activation_bytes() > 0) acts_ = shared_device_activations(model, plan_);
  plan_.check_fits();
  gemm_ = make_gemm();
  arena_ = device_alloc(plan_.total_bytes());
  device_memset(arena_, 0, plan_.total_bytes());
  pool_ = find_area("kv");
  if (plan_.evicting) staging_ = find_area("staging");
  if (plan_.move_slots > 0) move_ = find_area("move");
  layers_.assign(static_cast<size_t>(model.cfg.n_layers), Layer{});
  slots_.assign(static_cast<size_t>(model.cfg.n_layers), -1);
  for (int l : model.cfg.kv_policy_layers()) slots_[static_cast<size_t>(l)] = n_managed_++;  // as KvEvictor's slots
  try {
    w_ = shared_ ? shared_->views()
                 : upload_weights(model, [&](const std::string& name) { return static_cast<void*>(at<char>(name.c_str())); });
    const Rope rope(model.cfg, plan_.n_ctx);
    rope_mscale_ = rope.mscale();
    copy_to_device(at<double>("inv_freq"), rope.inv_freq().data(), rope.inv_freq().size() * sizeof(double));
    if (!model.cfg.swa_layers.empty())
      copy_to_device(at<double>("inv_freq") + model.cfg.head_dim / 2, rope.inv_freq(true).data(),
                     rope.inv_freq(true).size() * sizeof(double));
  } catch (...) {
    device_free(arena_);
    throw;
  }
  reset();
}

DeviceContext::~DeviceContext() { device_free(arena_); }

void DeviceContext::reset() {
  const ModelConfig& c = model_.cfg;
  n_past_ = 0;
  S_ = 0;
  prompt_evicts_ = false;
  continues_ = false;
  pool_base_ = 0;
  scores_.clear();
  budgets_.clear();
  pool_used_ = 0;
  kv_peak_ = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    L.off = plan_.evicting ? 0 : static_cast<int64_t>(l) * plan_.n_ctx;
    L.cap = plan_.evicting ? 0 : plan_.n_ctx;
    L.held = 0;
    L.lin = false;
    L.stored = 0;
  }
  device_memset(at<int32_t>("kv.n_held"), 0, static_cast<size_t>(c.n_layers) * c.n_kv_heads * sizeof(int32_t));
  if (plan_.recall) device_memset(at<int32_t>("store.n_held"), 0, static_cast<size_t>(n_managed_) * c.n_kv_heads * sizeof(int32_t));
  if (holds()) device_memset(at<int32_t>("hold.uses"), 0, static_cast<size_t>(n_managed_) * c.n_kv_heads * sizeof(int32_t));
  const size_t H = static_cast<size_t>(c.n_layers) * c.n_kv_heads, d = static_cast<size_t>(c.head_dim);
  if (plan_.evicting && plan_.kv.taylor()) {
    device_memset(at<float>("lin.n"), 0, H * sizeof(float));
    device_memset(at<float>("lin.ksum"), 0, H * d * sizeof(float));
    device_memset(at<float>("lin.vsum"), 0, H * d * sizeof(float));
    device_memset(at<float>("lin.M"), 0, H * d * d * sizeof(float));
  }
  if (const size_t K = centroids(); K > 0) {
    device_memset(at<float>("lin.n"), 0, H * sizeof(float));
    device_memset(at<float>("lin.cn"), 0, H * K * sizeof(float));
    device_memset(at<float>("lin.ck"), 0, H * K * d * sizeof(float));
    device_memset(at<float>("lin.cv"), 0, H * K * d * sizeof(float));
  }
}

DeviceContext::CacheArea DeviceContext::find_area(const std::string& name) const {
  return CacheArea{at<uint8_t>((name + ".k").c_str()), at<uint8_t>((name + ".v").c_str()), at<int32_t>((name + ".pos").c_str())};
}

KvLayerMut DeviceContext::area(const CacheArea& a, int64_t off, int cap) const {
  const ModelConfig& c = model_.cfg;
  const int64_t H = c.n_kv_heads;
  return KvLayerMut{a.k + off * H * static_cast<int64_t>(plan_.k_row), a.v + off * H * static_cast<int64_t>(plan_.v_row),
                    a.pos + off * H, c.n_kv_heads, cap, c.head_dim, plan_.type_k, plan_.type_v};
}

KvLayerMut DeviceContext::pool_layer(int l) const {
  const Layer& L = layers_[static_cast<size_t>(l)];
  return area(pool_, L.off, L.cap);
}

KvLayerMut DeviceContext::staging() const { return area(staging_, 0, static_cast<int>(plan_.staging_slots)); }

KvLayerView DeviceContext::view(const KvLayerMut& m, int l) const {
  const int32_t* n_held = at<int32_t>("kv.n_held") + static_cast<int64_t>(l) * m.n_kv_heads;
  return KvLayerView{m.k, m.v, m.pos, n_held, m.n_kv_heads, m.capacity, m.head_dim, m.type_k, m.type_v, model_.cfg.attn_softcap};
}

KvLayerMut DeviceContext::store_layer(int l) const {
  const ModelConfig& c = model_.cfg;
  if (slot(l) < 0) fail("internal: a layer the KV policy does not manage has no recall store");
  const int64_t rows = static_cast<int64_t>(slot(l)) * c.n_kv_heads * plan_.n_ctx;
  return KvLayerMut{at<uint8_t>("store.k") + rows * static_cast<int64_t>(plan_.store_row),
                    at<uint8_t>("store.v") + rows * static_cast<int64_t>(plan_.store_row), at<int32_t>("store.pos") + rows,
                    c.n_kv_heads, plan_.n_ctx, c.head_dim, plan_.store_type, plan_.store_type};
}

KvLayerView DeviceContext::store_view(int l) const {
  const KvLayerMut m = store_layer(l);
  const int32_t* n_held = at<int32_t>("store.n_held") + static_cast<int64_t>(slot(l)) * m.n_kv_heads;
  return KvLayerView{m.k, m.v, m.pos, n_held, m.n_kv_heads, m.capacity, m.head_dim, m.type_k, m.type_v, model_.cfg.attn_softcap};
}

void DeviceContext::store_evicted(int l, const KvLayerView& src, const int32_t* idx, int64_t ld, int count) {
  Layer& L = layers_[static_cast<size_t>(l)];
  if (count < 0) store_row_each(store_layer(l), L.stored, src, idx);
  else store_rows(store_layer(l), L.stored, src, idx, ld, count);
  L.stored += count < 0 ? 1 : count;  // decode_victims gives every head a victim while the layer holds candidates
  fill_i32(at<int32_t>("store.n_held") + static_cast<int64_t>(slot(l)) * model_.cfg.n_kv_heads, L.stored, model_.cfg.n_kv_heads);
}

void DeviceContext::score_pages(int l, const float* q, int rows, const int32_t* skip) {
  recall_page_scores(at<float>("recall.score"), plan_.score_pages, q, rows, store_view(l), plan_.kv.recall_page,
                     layers_[static_cast<size_t>(l)].stored, nullptr, skip);  // every head's, so the pages scored are those held
}

int DeviceContext::select_pages(int l, int rows, int64_t first_row, int64_t head_rows, const int32_t* skip) {
  const KvPolicyParams& p = plan_.kv;
  const int stored = layers_[static_cast<size_t>(l)].stored;
  recall_select(at<int32_t>("recall.pages"), plan_.recall_pages_ld, at<int32_t>("recall.n_chosen"),
                at<float>("recall.score") + first_row * plan_.score_pages, plan_.score_pages, rows, store_view(l), p.recall_page,
                p.recall_pages, at<uint8_t>("recall.select"), stored, head_rows, nullptr, skip);
  return std::min(p.recall_pages, (stored + p.recall_page - 1) / p.recall_page);
}

RecallHold DeviceContext::hold(int l) const {
  const ModelConfig& c = model_.cfg;
  const int64_t g0 = static_cast<int64_t>(slot(l)) * c.n_kv_heads;
  RecallHold h;
  h.uses = at<int32_t>("hold.uses") + g0, h.n_pages = at<int32_t>("hold.n_pages") + g0, h.count = at<int32_t>("hold.count") + g0;
  h.pages_ld = plan_.kv.recall_pages;
  h.pages = at<int32_t>("hold.pages") + g0 * h.pages_ld;
  h.u = at<float>("hold.u") + static_cast<int64_t>(slot(l)) * c.n_heads * c.head_dim;
  return h;
}

void DeviceContext::forget_choices(int l) {
  if (holds()) fill_i32(at<int32_t>("hold.uses") + static_cast<int64_t>(slot(l)) * model_.cfg.n_kv_heads, 0, model_.cfg.n_kv_heads);
}

void DeviceContext::attend_chosen(int l, float* att, const float* q, int32_t qpos, const KvLayerView& kvv, int max_held,
                                  int max_chosen) {
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& p = plan_.kv;
  RecallView rc;
  rc.max_chosen = max_chosen;
  rc.store = store_view(l), rc.page = p.recall_page, rc.pages_ld = plan_.recall_pages_ld;
  rc.pages = at<int32_t>("recall.pages"), rc.n_chosen = at<int32_t>("recall.n_chosen");
  ptaa_decode(att, q, qpos, c.n_heads, kvv, lin(l), c.layer_window(l), max_held, plan_.ptaa_split_len, at<float>("ptaa"), rc);
}

void DeviceContext::attend_recalled(int l, float* att, const float* q, int32_t qpos, const KvLayerView& kvv, int max_held) {
  const ModelConfig& c = model_.cfg;
  const int rows = c.n_heads;
  // With held choices, the heads whose choice holds skip the scoring and the choice, and attend it
  // with the pages written since; the others choose and keep their choice (RecallStore::holds_choice).
  int32_t* held = holds() ? at<int32_t>("recall.held") : nullptr;
  const RecallHold h = held ? hold(l) : RecallHold{};
  if (held) recall_hold_check(held, q, rows, c.n_kv_heads, c.head_dim, h, plan_.kv.recall_every, RecallStore::kHoldCos);
  score_pages(l, q, rows, held);
  int max_chosen = select_pages(l, rows, 0, 0, held);
  if (held) {
    recall_hold_update(at<int32_t>("recall.pages"), plan_.recall_pages_ld, at<int32_t>("recall.n_chosen"), held, h, q, rows, store_view(l),
                       plan_.kv.recall_page);
    const int stored = layers_[static_cast<size_t>(l)].stored;
    max_chosen = std::min(plan_.recall_pages_ld, (stored + plan_.kv.recall_page - 1) / plan_.kv.recall_page);
  }
  attend_chosen(l, att, q, qpos, kvv, max_held, max_chosen);
}

void DeviceContext::attend_chunk_recalled(int l, int t0, int nb, const int32_t* pos, const int32_t* pos_host, const KvLayerView& kvv,
                                          float* att, const float* q) {
  const ModelConfig& c = model_.cfg;
  const int64_t qd = c.q_dim();
  const int H = c.n_kv_heads, group = c.n_heads / H, tail = std::min(nb, kChunkRecallTokens), head = nb - tail;
  forget_choices(l);  // a call that is not a decode step chooses for itself (the CPU's forget_choices)
  // The call's last tokens' query rows, by KV head (the rows recall_page_scores takes for a head
  // of tail * group queries): row (g * tail + t) * group + i = token t's query head g * group + i.
  int32_t* d_idx = at<int32_t>("recall.q_idx");
  const int rows = tail * c.n_heads;
  if (q_idx_tokens_ != tail) {  // the index follows the tail's length only: uploaded when it changes
    std::vector<int32_t> idx(static_cast<size_t>(rows));
    for (int g = 0; g < H; ++g)
      for (int t = 0; t < tail; ++t)
        for (int i = 0; i < group; ++i) idx[static_cast<size_t>((g * tail + t) * group + i)] = t * c.n_heads + g * group + i;
    copy_to_device(d_idx, idx.data(), idx.size() * sizeof(int32_t));
    q_idx_tokens_ = tail;
  }
  float* qh = at<float>("recall.q");
  gather_rows(qh, q + static_cast<int64_t>(head) * qd, d_idx, rows, c.head_dim);
  score_pages(l, qh, rows);  // once for the call: every choice below reads these scores
  if (head > 0) attend_chunk_head(l, head, pos, att, q, select_pages(l, rows));
  // The last tokens, one at a time: each one's rows choose their own pages, as a decode step's.
  const int held = layers_[static_cast<size_t>(l)].held;
  for (int t = 0; t < tail; ++t)
    attend_chosen(l, att + (head + t) * qd, q + (head + t) * qd, pos_host[t0 + head + t], kvv, held,
                  select_pages(l, c.n_heads, static_cast<int64_t>(t) * group, static_cast<int64_t>(tail) * group));
}

void DeviceContext::attend_chunk_head(int l, int head, const int32_t* pos, float* att, const float* q, int max_pages) {
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& p = plan_.kv;
  const int64_t qd = c.q_dim();
  const Layer& L = layers_[static_cast<size_t>(l)];
  // The chosen pages' rows join the call's view after its own rows (staging: the rows the chunks
  // before kept, then this chunk's so far), for one prefill_attention; then they leave it.
  const KvLayerMut m = staging();
  recall_gather(m, L.held, at<int32_t>("kv.n_held") + static_cast<int64_t>(l) * c.n_kv_heads, store_view(l), p.recall_page,
                at<int32_t>("recall.pages"), plan_.recall_pages_ld, at<int32_t>("recall.n_chosen"), max_pages);
  prefill_attention(att, qd, q, qd, pos, head, c.n_heads, view(m, l), lin(l), c.layer_window(l));
  set_held(l, L.held);
}

int DeviceContext::centroids() const { return plan_.evicting ? plan_.kv.centroid_count() : 0; }

LinearStateView DeviceContext::lin(int l) const {
  const ModelConfig& c = model_.cfg;
  const int64_t H = c.n_kv_heads, d = c.head_dim, g0 = static_cast<int64_t>(l) * H;
  if (const int64_t K = centroids(); K > 0) {
    LinearStateView v{at<float>("lin.n") + g0, nullptr, nullptr, nullptr};
    v.centroids = static_cast<int>(K);
    v.cn = at<float>("lin.cn") + g0 * K;
    v.ck = at<float>("lin.ck") + g0 * K * d;
    v.cv = at<float>("lin.cv") + g0 * K * d;
    return v;
  }
  if (!(plan_.evicting && plan_.kv.taylor())) return LinearStateView{nullptr, nullptr, nullptr, nullptr};
  return LinearStateView{at<float>("lin.n") + g0, at<float>("lin.ksum") + g0 * d, at<float>("lin.vsum") + g0 * d,
                         at<float>("lin.M") + g0 * d * d};
}

void DeviceContext::set_held(int l, int held) {
  layers_[static_cast<size_t>(l)].held = held;
  fill_i32(at<int32_t>("kv.n_held") + static_cast<int64_t>(l) * model_.cfg.n_kv_heads, held, model_.cfg.n_kv_heads);
}

int64_t DeviceContext::tokens_held() const {
  int64_t n = 0;
  for (const Layer& L : layers_) n += static_cast<int64_t>(L.held) * model_.cfg.n_kv_heads;
  return n;
}

size_t DeviceContext::kv_bytes_used() const {
  const ModelConfig& c = model_.cfg;
  size_t lin_heads = 0;
  for (const Layer& L : layers_) lin_heads += L.lin ? static_cast<size_t>(c.n_kv_heads) : 0;
  return static_cast<size_t>(tokens_held()) * (plan_.k_row + plan_.v_row + sizeof(int32_t)) +
         lin_heads * LinearState(c.head_dim, centroids()).bytes() + kv_store_bytes();
}

size_t DeviceContext::kv_store_bytes() const {
  size_t rows = 0;
  for (const Layer& L : layers_) rows += static_cast<size_t>(L.stored) * static_cast<size_t>(model_.cfg.n_kv_heads);
  return rows * (2 * plan_.store_row + sizeof(int32_t));  // RecallStore::planned_bytes of a Keys store
}

void DeviceContext::note_usage() { kv_peak_ = std::max(kv_peak_, kv_bytes_used()); }

// The layer's operations on the device for a chunk of nb rows starting at row t0 of the prompt
// (the rows of `x`; every other activation holds the chunk's rows from its start), with `attend`
// as the KV hooks and attention. The buffers are looked up in the plan once per chunk, not at
// every operation.
class DeviceContext::Ops final : public LayerOps {
 public:
  Ops(DeviceContext& d, int l, int t0, int nb, const AttendRows& attend)
      : d_(d), c_(d.model_.cfg), L_(d.w_.layers[static_cast<size_t>(l)]), l_(l), nb_(nb), attend_(attend),
        act_(d.at<uint16_t>("act_bf16")), positions_(d.at<int32_t>("positions") + t0), inv_freq_(d.at<double>("inv_freq")),
        rows_{d.at<float>("x") + static_cast<int64_t>(t0) * c_.dim, d.at<float>("xb"), d.at<float>("q"), d.at<float>("k"),
              d.at<float>("v"), d.at<float>("att"), d.at<float>("gate"), d.at<float>("up")} {}

  void rmsnorm(Act out, Act in, Weight w, float eps) override {
    slake::gpu::rmsnorm(ptr(out), ptr(in), vector(w), nb_, static_cast<int>(act_width(c_, in)), eps);
  }
  void matmul(Act out, Act in, Weight w) override { d_.gemm_->matmul(ptr(out), ptr(in), nb_, matrix(w), act_); }
  void add_bias(Act a, Weight b) override { bias_add(ptr(a), vector(b), nb_, act_width(c_, a)); }
  void rmsnorm_heads(Act a, Weight w, int n_heads, float eps) override {
    const int64_t width = act_width(c_, a), d = c_.head_dim;
    if (width != static_cast<int64_t>(n_heads) * d) fail("internal: rmsnorm_heads normalises whole rows of heads");
    slake::gpu::rmsnorm(ptr(a), ptr(a), vector(w), nb_ * n_heads, c_.head_dim, eps);
  }
  void rope(Act a, int n_heads) override {  // the plan's inv_freq: the global table, then the sliding layers'
    const double* inv_freq = inv_freq_ + (c_.layer_local(l_) ? c_.head_dim / 2 : 0);
    slake::gpu::rope(ptr(a), positions_, nb_, act_width(c_, a), n_heads, c_.head_dim, inv_freq, c_.rope_layout == RopeLayout::Half,
                     d_.rope_mscale_);
  }
  void attention(Act out, Act q, Act k, Act v) override { attend_(ptr(out), ptr(q), ptr(k), ptr(v)); }
  void swiglu(Act a, Act b) override { slake::gpu::swiglu(ptr(a), ptr(a), ptr(b), nb_ * act_width(c_, a)); }
  void geglu(Act a, Act b) override { slake::gpu::geglu(ptr(a), ptr(a), ptr(b), nb_ * act_width(c_, a)); }
  void add(Act x, Act y) override { residual_add(ptr(x), ptr(y), nb_ * act_width(c_, x)); }
  // The router's logits come to the host, where moe_route (the CPU's rule) chooses; each expert
  // then runs its rows as one block: gathered, its three GEMMs, added back in their weights.
  void moe_ffn(Act x, Act in) override {
    const int E = c_.n_expert, K = c_.n_expert_used;
    const int64_t dim = act_width(c_, in), ff = c_.ffn_dim;
    const int64_t sff = c_.shared_expert_ffn_dim;
    float* logits = d_.at<float>("moe_logits");
    d_.gemm_->matmul(logits, ptr(in), nb_, L_.router, act_);
    std::vector<float> host(static_cast<size_t>(nb_) * E), shexp_gate(sff > 0 ? static_cast<size_t>(nb_) : 0);
    copy_to_host(host.data(), logits, host.size() * sizeof(float));
    if (sff > 0) {  // the shared expert's gate logit of every row
      float* g = d_.at<float>("moe_shexp_gate");
      d_.gemm_->matmul(g, ptr(in), nb_, L_.shexp_router, act_);
      copy_to_host(shexp_gate.data(), g, shexp_gate.size() * sizeof(float));
    }
    std::vector<std::vector<std::pair<int32_t, float>>> rows(static_cast<size_t>(E));
    std::vector<ExpertChoice> choice(static_cast<size_t>(K));
    for (int t = 0; t < nb_; ++t) {
      moe_route(host.data() + static_cast<size_t>(t) * E, E, K, c_.expert_norm, choice.data());
      for (const ExpertChoice& ch : choice) rows[static_cast<size_t>(ch.expert)].push_back({t, ch.weight});
    }
    std::vector<int32_t> idx;  // every expert's rows, expert after expert, and their weights
    std::vector<float> w;
    for (const auto& r : rows)
      for (const auto& [t, wt] : r) idx.push_back(t), w.push_back(wt);
    for (size_t t = 0; t < shexp_gate.size(); ++t)  // then every row for the shared expert, in its gate
      idx.push_back(static_cast<int32_t>(t)), w.push_back(shared_expert_weight(shexp_gate[t]));
    int32_t* d_idx = d_.at<int32_t>("moe_idx");
    float* d_w = d_.at<float>("moe_w");
    copy_to_device(d_idx, idx.data(), idx.size() * sizeof(int32_t));
    copy_to_device(d_w, w.data(), w.size() * sizeof(float));
    float *in_rows = d_.at<float>("moe_rows"), *out_rows = d_.at<float>("moe_out"), *acc = d_.at<float>("moe_acc");
    device_memset(acc, 0, static_cast<size_t>(nb_) * dim * sizeof(float));
    size_t at = 0;  // the next list's start in d_idx / d_w
    // down(silu(gate(xr)) * up(xr)) for m rows xr, through a hidden layer `width` wide, added to
    // acc at the rows of the next list in their weights.
    auto ffn_into_acc = [&](const float* xr, int m, int64_t width, const DeviceMatrix& wg, const DeviceMatrix& wu,
                            const DeviceMatrix& wd) {
      d_.gemm_->matmul(ptr(Act::Gate), xr, m, wg, act_);
      d_.gemm_->matmul(ptr(Act::Up), xr, m, wu, act_);
      slake::gpu::swiglu(ptr(Act::Gate), ptr(Act::Gate), ptr(Act::Up), m * width);
      d_.gemm_->matmul(out_rows, ptr(Act::Gate), m, wd, act_);
      scatter_add_rows(acc, out_rows, d_idx + at, d_w + at, m, dim);
      at += static_cast<size_t>(m);
    };
    for (int e = 0; e < E; ++e) {
      const int m = static_cast<int>(rows[static_cast<size_t>(e)].size());
      if (m == 0) continue;
      gather_rows(in_rows, ptr(in), d_idx + at, m, dim);
      const size_t ei = static_cast<size_t>(e);
      ffn_into_acc(in_rows, m, ff, L_.exp_gate[ei], L_.exp_up[ei], L_.exp_down[ei]);
    }
    if (sff > 0) ffn_into_acc(ptr(in), nb_, sff, L_.shexp_gate, L_.shexp_up, L_.shexp_down);  // every row, in order
    residual_add(ptr(x), acc, nb_ * dim);
  }

 private:
  float* ptr(Act a) const {
    switch (a) {
      case Act::X: return rows_[0];
      case Act::XB: return rows_[1];
      case Act::Q: return rows_[2];
      case Act::K: return rows_[3];
      case Act::V: return rows_[4];
      case Act::Att: return rows_[5];
      case Act::Gate: return rows_[6];
      case Act::Up: return rows_[7];
    }
    fail("internal: unknown activation");
  }
  const float* vector(Weight w) const {
    const float* v = nullptr;
    switch (w) {
      case Weight::AttnNorm: v = L_.attn_norm; break;
      case Weight::FfnNorm: v = L_.ffn_norm; break;
      case Weight::Bq: v = L_.bq; break;
      case Weight::Bk: v = L_.bk; break;
      case Weight::Bv: v = L_.bv; break;
      case Weight::QNorm: v = L_.q_norm; break;
      case Weight::KNorm: v = L_.k_norm; break;
      case Weight::AttnPostNorm: v = L_.attn_post_norm; break;
      case Weight::FfnPostNorm: v = L_.ffn_post_norm; break;
      default: fail("internal: not a vector weight");
    }
    if (!v) fail("internal: the model has no such vector weight");
    return v;
  }
  const DeviceMatrix& matrix(Weight w) const {
    switch (w) {
      case Weight::Wq: return L_.wq;
      case Weight::Wk: return L_.wk;
      case Weight::Wv: return L_.wv;
      case Weight::Wo: return L_.wo;
      case Weight::Gate: return L_.w_gate;
      case Weight::Up: return L_.w_up;
      case Weight::Down: return L_.w_down;
      default: fail("internal: not a matrix weight");
    }
  }

  DeviceContext& d_;
  const ModelConfig& c_;
  const LayerWeightsOnDevice& L_;
  int l_, nb_;
  const AttendRows& attend_;
  uint16_t* act_;
  const int32_t* positions_;
  const double* inv_freq_;
  float* rows_[8];  // in the order of Act
};

void DeviceContext::run_layer(int l, int n, const int32_t* pos_host, bool prompt) {
  for (int t0 = 0; t0 < n; t0 += plan_.n_batch) {
    const int nb = std::min(plan_.n_batch, n - t0);
    const int32_t* pos = at<int32_t>("positions") + t0;
    run_layer_rows(l, t0, nb, [&](float* att, float* q, float* k, float* v) { attend(l, t0, nb, pos, pos_host, prompt, att, q, k, v); });
  }
}

void DeviceContext::run_layer_rows(int l, int t0, int nb, const AttendRows& attend_rows) {
  Ops ops(*this, l, t0, nb, attend_rows);
  slake::run_layer(model_.cfg, ops);
}

void DeviceContext::attend(int l, int t0, int nb, const int32_t* pos, const int32_t* pos_host, bool prompt, float* att, float* q, float* k,
                           float* v) {
  const ModelConfig& c = model_.cfg;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  const bool in_staging = prompt && plan_.evicting;
  const KvLayerMut cache = in_staging ? staging() : pool_layer(l);
  const int held = layers_[static_cast<size_t>(l)].held;
  kv_append(cache, held, k, v, kvd, pos, nb);
  set_held(l, held + nb);
  if (!prompt && plan_.evicting && !c.layer_local(l)) decode_evict(l, q, pos_host[t0]);  // nb == 1 here (eval splits)
  if (prompt && prompt_evicts_) {
    // The observing queries: the last of this prompt's (or prompt chunk's) S_ - n_past_ rows.
    const int obs0 = S_ - n_past_ - plan_.kv.observed(), first = std::max(t0, obs0), last = t0 + nb;
    if (first < last)
      copy_device(at<float>("q_window") + (first - obs0) * qd, q + (first - t0) * qd,
                  static_cast<size_t>(last - first) * qd * sizeof(float));
  }
  const KvLayerView kvv = view(in_staging ? staging() : pool_layer(l), l);
  const int max_held = layers_[static_cast<size_t>(l)].held;
  const bool recalls = plan_.recall && layers_[static_cast<size_t>(l)].stored > 0;  // a layer the policy manages
  if (recalls && !prompt && nb > 1) forget_choices(l);  // rows of no decode step: they attend no pages
  if (recalls && prompt)  // a prompt chunk after the first
    attend_chunk_recalled(l, t0, nb, pos, pos_host, kvv, att, q);
  else if (recalls && nb == 1)
    attend_recalled(l, att, q, pos_host[t0], kvv, max_held);
  else if (nb == 1)
    ptaa_decode(att, q, pos_host[t0], c.n_heads, kvv, lin(l), c.layer_window(l), max_held, plan_.ptaa_split_len, at<float>("ptaa"));
  else
    prefill_attention(att, qd, q, qd, pos, nb, c.n_heads, kvv, lin(l), c.layer_window(l));
  if (c.layer_local(l)) {
    // What no later query can see leaves a local layer (as the CPU's KvCache::drop_before): its rows
    // are the latest positions in order (no policy evicts here), the last at pos_host[t0 + nb - 1],
    // and a later query sees sliding_window - 1 of them.
    const int kept = std::min(held + nb, c.sliding_window - 1), drop = held + nb - kept;
    if (drop > 0) {
      const KvLayerMut m = in_staging ? staging() : pool_layer(l);
      fill_i32(at<int32_t>("local_drop"), drop - 1, c.n_kv_heads);
      shift_rows_up(m, area(move_, 0, m.capacity), at<int32_t>("local_drop"), held + nb, drop);
      set_held(l, kept);
      note_usage();
    }
  }
}

int64_t DeviceContext::decode_budget(int l) const {
  const int m = slot(l);
  return m >= 0 && m < static_cast<int>(budgets_.size()) ? budgets_[static_cast<size_t>(m)] : plan_.kv.budget - plan_.kv.window;
}

int DeviceContext::layer_capacity(int k) const {
  const ModelConfig& c = model_.cfg;
  if (c.layer_local(k)) return std::min(c.sliding_window, plan_.n_ctx + 1);
  return static_cast<int>(budgets_[static_cast<size_t>(slot(k))]) + plan_.kv.window + 1;
}

void DeviceContext::on_layer_done(int l) {
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& p = plan_.kv;
  if (!prompt_evicts_) {  // kept whole: into the pool with room for decode up to the default budget
    const int cap = c.layer_local(l) ? layer_capacity(l) : std::min(std::max(S_, p.budget) + 1, plan_.n_ctx + 1);
    check_pool(pool_used_ + cap);
    relocate(l, staging(), S_, pool_used_, cap);
    pool_used_ += cap;
    return;
  }
  if (!c.layer_local(l)) score_layer(l);  // a local layer keeps its window: nothing to score
  repack(l);
}

void DeviceContext::score_layer(int l) {
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& p = plan_.kv;
  const int H = c.n_kv_heads, W = p.window, n_obs = p.observed();
  // The candidates: the tokens at positions below P, the staged rows below Pr (all of the prompt's,
  // or what the chunks before kept and this chunk's; the last W rows are the window).
  const int P = S_ - W, rows = layers_[static_cast<size_t>(l)].held, Pr = rows - W;
  const KvLayerView st = view(staging(), l);
  float* ind = at<float>("indicator") + static_cast<int64_t>(l) * H * plan_.n_ctx;  // [g][P], by position
  LayerWindowTerms terms;
  switch (parts_.selector) {
    case KvSelector::Recent: {
      std::vector<float> r(static_cast<size_t>(H) * P);
      for (int g = 0; g < H; ++g)
        for (int j = 0; j < P; ++j) r[static_cast<size_t>(g) * P + j] = static_cast<float>(recency_score(j, P));
      copy_to_device(ind, r.data(), r.size() * sizeof(float));
      break;
    }
    case KvSelector::WindowMax7:
    case KvSelector::Indicator: {
      const bool snap = parts_.selector == KvSelector::WindowMax7;
      float* by_row = at<float>("indicator_rows");  // [g][Pr]
      window_stats(by_row, at<double>("totals"), at<float>("q_window"), rows, n_obs, Pr, c.n_heads, st, snap ? 0.0 : p.gamma,
                   snap ? 1 : 0, at<double>("window_scratch"));
      scatter_scores(ind, P, by_row, st, Pr);
      const bool vabs = parts_.allocator == KvAllocator::Vabs || parts_.allocator == KvAllocator::VabsVariance;
      if (vabs) {
        topk_flags(at<uint8_t>("uniform_kept"), by_row, H, Pr, Pr, p.budget - p.window);
        vabs_terms(at<double>("vabs"), at<float>("q_window"), rows, n_obs, Pr, c.n_heads, st, at<uint8_t>("uniform_kept"));
      }
      if (!by_preference(parts_.allocator)) break;
      double t[2];  // the window's totals: Hn, Vr
      synchronize();
      copy_to_host(t, at<double>("totals"), sizeof t);
      terms.entropy = t[0];
      terms.variance = t[1];
      if (vabs) {
        std::vector<double> v(static_cast<size_t>(n_obs) * c.n_heads * 2);
        copy_to_host(v.data(), at<double>("vabs"), v.size() * sizeof(double));
        double tv_va = 0, en = 0;  // per head over the observing queries, then over the heads, as slake::vabs_terms
        for (int h = 0; h < c.n_heads; ++h) {
          double a = 0, b = 0;
          for (int i = 0; i < n_obs; ++i) a += v[(static_cast<size_t>(i) * c.n_heads + h) * 2], b += v[(static_cast<size_t>(i) * c.n_heads + h) * 2 + 1];
          tv_va += a, en += b;
        }
        const double rows = static_cast<double>(c.n_heads) * n_obs;
        terms.vabs_tv_va = tv_va / rows;
        terms.vabs_entropy = en / rows;
      }
      break;
    }
    default:
      fail("internal: no selector for an evicting policy");
  }
  scores_.push_back(layer_preference(p, parts_.allocator, terms));
  std::vector<int64_t> held;  // a later chunk: each seen layer's candidates, which cap its budget
  for (int k = 0; continues_ && k <= l; ++k)
    if (slot(k) >= 0) held.push_back(layers_[static_cast<size_t>(k)].held - W);
  budgets_ = cascade_budgets(p, parts_.allocator, n_managed_, S_, scores_, budgets_, continues_ ? &held : nullptr);
}

void DeviceContext::repack(int l) {
  // Evict every seen layer to its budget (a local layer keeps what it holds) and repack the pool's
  // half from pool_base_: layer k moves to the sum of the new capacities before it (never above
  // where it was), through the move area.
  const ModelConfig& c = model_.cfg;
  const int H = c.n_kv_heads, W = plan_.kv.window;
  auto keep = [&](int k) {
    return c.layer_local(k) ? std::numeric_limits<int64_t>::max() : budgets_[static_cast<size_t>(slot(k))];
  };
  int64_t off = pool_base_;
  for (int k = 0; k < l; ++k) {
    Layer& Lk = layers_[static_cast<size_t>(k)];
    const int cap = layer_capacity(k);
    const int64_t n_cand = Lk.held - W;
    if (!(cap == Lk.cap && off == Lk.off && keep(k) >= n_cand)) {
      const KvLayerMut mv = area(move_, 0, cap);
      const KvLayerMut src = pool_layer(k);
      // Gather into the move area laid out with the new capacity, then copy it into place.
      relocate(k, src, keep(k), -1, cap);
      Lk.off = off;
      Lk.cap = cap;
      const KvLayerMut dst = pool_layer(k);
      const size_t rows = static_cast<size_t>(H) * cap;
      copy_device(dst.k, mv.k, rows * plan_.k_row);
      copy_device(dst.v, mv.v, rows * plan_.v_row);
      copy_device(dst.pos, mv.pos, rows * sizeof(int32_t));
    }
    off += cap;
  }
  const int cap_l = layer_capacity(l);
  check_pool(off + cap_l);  // before anything is written there
  relocate(l, staging(), keep(l), off, cap_l);
  pool_used_ = off + cap_l;
}

void DeviceContext::relocate(int l, const KvLayerMut& src, int64_t budget, int64_t off, int cap) {
  // off < 0: into the move area (laid out with `cap` rows per head) instead of the pool.
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& p = plan_.kv;
  Layer& L = layers_[static_cast<size_t>(l)];
  const int H = c.n_kv_heads, held = L.held, W = p.window;
  const int n_cand = prompt_evicts_ ? held - W : held;
  const bool evict = prompt_evicts_ && budget < n_cand;
  const int64_t ld = plan_.max_capacity;
  uint8_t* flags = at<uint8_t>("flags");
  int32_t *kept = at<int32_t>("kept_idx"), *evicted = at<int32_t>("evicted_idx");
  int32_t *n_kept = at<int32_t>("counts"), *n_evicted = n_kept + H;
  const KvLayerView sv = view(src, l);
  device_memset(flags, 1, static_cast<size_t>(H) * held);  // [g][held]: everything kept by default
  if (evict) {
    gather_scores(at<float>("cand_scores"), held, at<float>("indicator") + static_cast<int64_t>(l) * H * plan_.n_ctx, S_ - W, sv,
                  n_cand);
    topk_flags(flags, at<float>("cand_scores"), H, n_cand, held, budget);
  }
  partition_rows(kept, n_kept, evicted, n_evicted, flags, held, sv.n_held, H, ld);
  KvLayerMut dst;
  if (off < 0) {
    dst = area(move_, 0, cap);
  } else {
    L.off = off;
    L.cap = cap;
    dst = pool_layer(l);
  }
  const int kept_rows = evict ? static_cast<int>(budget) + W : held;
  gather_rows(dst, sv, kept, ld, n_kept, kept_rows);
  if (evict && plan_.recall) store_evicted(l, sv, evicted, ld, held - kept_rows);  // src is not written
  if (evict && p.absorbs()) {  // the evicted rows, read where they are (src is not written)
    if (centroids() > 0) centroid_absorb_rows(lin(l), sv, evicted, ld, n_evicted);
    else linear_absorb_rows(lin(l), sv, evicted, ld, n_evicted);
    L.lin = true;
  }
  set_held(l, kept_rows);
  note_usage();
}

void DeviceContext::decode_evict(int l, const float* q, int32_t qpos) {
  const ModelConfig& c = model_.cfg;
  const KvPolicyParams& p = plan_.kv;
  const int64_t b = decode_budget(l);
  const int mode = parts_.selector == KvSelector::Recent ? 2 : parts_.selector == KvSelector::WindowMax7 ? 1 : 0;
  Layer& L = layers_[static_cast<size_t>(l)];
  const KvLayerMut m = pool_layer(l);
  int32_t* victim = at<int32_t>("victim");
  note_usage();
  while (L.held > b + p.window) {
    const KvLayerView kv = view(m, l);
    decode_victims(victim, at<double>("victim_scratch"), q, qpos, c.n_heads, kv, L.held - p.window, mode);
    if (p.absorbs()) {
      if (centroids() > 0) centroid_absorb_one(lin(l), kv, victim);
      else linear_absorb_one(lin(l), kv, victim);
      L.lin = true;
    }
    if (plan_.recall) store_evicted(l, kv, victim, 0, -1);
    remove_rows(m, area(move_, 0, L.cap), victim, L.held);
    set_held(l, L.held - 1);
  }
  note_usage();
}

void DeviceContext::check_pool(int64_t end) const {
  if (end > pool_base_ + plan_.pool_half || end > plan_.pool_slots) fail("internal: the KV pool overflows its plan");
}

void DeviceContext::stage_held(int l) {
  // A later prompt chunk's layer: the rows the chunks before kept go to the staging area first,
  // where the chunk's rows join them (head by head: the two areas' capacities differ).
  const Layer& L = layers_[static_cast<size_t>(l)];
  if (L.held == 0) return;
  const KvLayerMut src = pool_layer(l), dst = staging();
  for (int64_t g = 0; g < model_.cfg.n_kv_heads; ++g) {
    const int64_t s0 = g * src.capacity, d0 = g * dst.capacity, n = L.held;
    copy_device(dst.k + d0 * static_cast<int64_t>(plan_.k_row), src.k + s0 * static_cast<int64_t>(plan_.k_row), n * plan_.k_row);
    copy_device(dst.v + d0 * static_cast<int64_t>(plan_.v_row), src.v + s0 * static_cast<int64_t>(plan_.v_row), n * plan_.v_row);
    copy_device(dst.pos + d0, src.pos + s0, n * sizeof(int32_t));
  }
}

void DeviceContext::eval(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits) {
  check_eval_tokens(model_.cfg, tokens, n_past_, plan_.n_ctx);
  const int n = static_cast<int>(tokens.size());
  const bool prompt = n_past_ == 0;
  if (!prompt && n > 1 && plan_.evicting) {  // decoded one at a time, as Context does
    eval_one_at_a_time(tokens, logits, all_logits, [&](int32_t t, std::vector<float>* l) { eval({t}, l); });
    return;
  }
  // Chunked prefill (KvPolicyParams::prefill_chunk), cut as Context::eval cuts it.
  if (prompt && plan_.evicting && plan_.kv.prefill_chunk > 0 && n > plan_.kv.prefill_chunk) {
    eval_in_chunks(plan_.kv, tokens, logits, all_logits,
                   [&](const std::vector<int32_t>& t, std::vector<float>* l) { eval_rows(t, l, all_logits, true); });
    return;
  }
  eval_rows(tokens, logits, all_logits, prompt);
}

void DeviceContext::eval_prompt_chunk(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  check_eval_tokens(model_.cfg, tokens, n_past_, plan_.n_ctx);
  check_prompt_chunk(plan_.kv, n_past_, static_cast<int>(tokens.size()));
  // Only a plan for chunks has the pool's second half that a later chunk's layers go into.
  if (n_past_ > 0 && plan_.kv.prefill_chunk <= 0)
    fail("eval_prompt_chunk: a chunk after the first needs a context made with a prefill chunk size (--prefill-chunk)");
  eval_rows(tokens, logits, false, true);
}

void DeviceContext::eval_rows(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits, bool prompt) {
  const ModelConfig& c = model_.cfg;
  const int n = static_cast<int>(tokens.size());
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), n_past_);
  copy_to_device(at<int32_t>("tokens"), tokens.data(), tokens.size() * sizeof(int32_t));
  copy_to_device(at<int32_t>("positions"), pos.data(), pos.size() * sizeof(int32_t));
  embedding(at<float>("x"), w_.tok_embd.data, ElemType::BF16, at<int32_t>("tokens"), n, c.dim, c.embed_scale);
  if (prompt) {
    // A prompt, or a chunk of one after the chunks before it: its positions end at S_. A later
    // chunk's layers are placed in the other half of the pool from the one they are read from.
    continues_ = n_past_ > 0;
    S_ = n_past_ + n;
    prompt_evicts_ = plan_.evicting && S_ > plan_.kv.budget + plan_.kv.window;
    scores_.clear();
    budgets_.clear();
    pool_base_ = continues_ ? plan_.pool_half - pool_base_ : 0;
    pool_used_ = pool_base_;
  }
  for (int l = 0; l < c.n_layers; ++l) {
    if (prompt && continues_) stage_held(l);
    run_layer(l, n, pos.data(), prompt);
    note_usage();
    if (prompt && plan_.evicting) on_layer_done(l);
  }
  note_usage();
  n_past_ += n;
  if (!logits) {
    synchronize();
    return;
  }
  const int first = all_logits ? 0 : n - 1;
  output_logits(first, n - first, logits);
}

void DeviceContext::output_logits(int first, int rows, std::vector<float>* logits) {
  const ModelConfig& c = model_.cfg;
  logits->resize(static_cast<size_t>(rows) * c.n_vocab);
  float *xb = at<float>("xb"), *lg = at<float>("logits");
  for (int r0 = 0; r0 < rows; r0 += plan_.n_batch) {
    const int nr = std::min(plan_.n_batch, rows - r0);
    rmsnorm(xb, at<float>("x") + static_cast<int64_t>(first + r0) * c.dim, w_.output_norm, nr, c.dim, c.rms_eps);
    gemm_->matmul(lg, xb, nr, w_.output, at<uint16_t>("act_bf16"));
    synchronize();
    copy_to_host(logits->data() + static_cast<size_t>(r0) * c.n_vocab, lg, static_cast<size_t>(nr) * c.n_vocab * sizeof(float));
  }
  soft_cap_all(logits->data(), logits->size(), c.final_softcap);  // on the host, where the logits are sampled
}

}  // namespace slake::gpu
