#include "device_plan.h"

#include <algorithm>
#include <cstdio>

#include "cuda/device_weights.h"
#include "device_memory.h"
#include "kernels.h"
#include "slake/error.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/kv_recall.h"

namespace slake::gpu {

size_t device_weight_bytes(const TensorView& t, bool matrix) {
  return static_cast<size_t>(t.n_elements()) * (matrix ? sizeof(uint16_t) : sizeof(float));
}

ElemType device_kv_type(KvType t) {
  check_kv_type_on_cuda(t);
  switch (t) {
    case KvType::F32: return ElemType::F32;
    case KvType::F16: return ElemType::F16;
    case KvType::BF16: return ElemType::BF16;
    case KvType::Q8_0: return ElemType::Q8_0;
    default: break;
  }
  fail(std::string("internal: no device row type for KV cache type ") + kv_type_name(t));
}

namespace {
std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}
}  // namespace

void require_device_memory(size_t bytes, const std::string& what, const std::string& advice, const std::string& detail) {
  size_t free_b = 0, total_b = 0;
  memory_info(&free_b, &total_b);
  if (bytes > free_b)
    fail(what + " " + mib(bytes) + " MiB" + detail + " of device memory, but the device has " + mib(free_b) + " MiB free of " +
         mib(total_b) + " MiB" + advice);
}

DevicePlan::DevicePlan(const Model& model, const ContextParams& params, bool with_weights, bool shared_activations)
    : shared_activations_(shared_activations) {
  const ModelConfig& c = model.cfg;
  if (params.n_ctx < 0) fail("context size must not be negative, got " + std::to_string(params.n_ctx));
  if (params.n_batch < 1) fail("batch size must be positive, got " + std::to_string(params.n_batch));
  n_ctx = params.n_ctx == 0 ? c.n_ctx_train : params.n_ctx;
  if (n_ctx < 1) fail("context size must be positive, got " + std::to_string(n_ctx));
  n_batch = std::min(params.n_batch, n_ctx);
  kv = resolve_kv_policy(params.kv, false, &c);
  evicting = kv.evicts();
  local_layers = !c.swa_layers.empty();
  if (c.head_dim > kMaxHeadDim || c.head_dim % 2 != 0)
    fail("the cuda backend supports head_dim up to " + std::to_string(kMaxHeadDim) + " (even), the model has " +
         std::to_string(c.head_dim));

  type_k = device_kv_type(kv.type_k);
  type_v = device_kv_type(kv.type_v);
  check_kv_type(kv.type_k, c.head_dim, "KV cache key type");
  check_kv_type(kv.type_v, c.head_dim, "KV cache value type");
  k_row = static_cast<size_t>(elem_row_bytes(type_k, c.head_dim));
  v_row = static_cast<size_t>(elem_row_bytes(type_v, c.head_dim));
  const size_t L = static_cast<size_t>(c.n_layers), H = static_cast<size_t>(c.n_kv_heads), d = static_cast<size_t>(c.head_dim);
  const size_t ctx = static_cast<size_t>(n_ctx), B = static_cast<size_t>(n_batch);

  // Weights, in the order they are uploaded, unless the context shares them (device_weights.h).
  if (with_weights)
    for_each_device_weight(model, [&](const std::string& name, const TensorView&, bool, size_t bytes) { add("weights", name, bytes); });

  // The exact cache. Without eviction every layer owns n_ctx slots. With eviction the layers share
  // a pool: after a prompt's layer is done, each layer seen so far keeps at most budget + Sw rows
  // (+1 for a decode step's append before its eviction), and the budgets of the seen layers sum to
  // at most (C - Sw) * n_layers; a prompt that evicts nothing keeps at most C + Sw rows. The
  // prompt's current layer is written to the staging area, and relocations go through the move
  // area, each one layer of n_ctx + 1 slots (the linear state absorbs evicted rows in place).
  // A prompt prefilled in chunks (kv.prefill_chunk) has each chunk's layers read what the chunk
  // before left in one half of the pool while they are placed in the other (their budgets restart
  // per chunk, so the layers seen by a chunk and those not yet seen can hold the whole bound each).
  if (!evicting) {
    pool_slots = pool_half = static_cast<int64_t>(L * ctx);
    staging_slots = 0;
    move_slots = local_layers ? n_ctx : 0;  // local layers drop their oldest rows through the move area
    max_capacity = n_ctx;
  } else {
    const int64_t per_layer = std::min<int64_t>(static_cast<int64_t>(kv.budget) + kv.window + 1, n_ctx + 1);
    // A local layer (Gemma 3) keeps its window - 1 rows, one more while a decode step appends.
    int64_t managed = static_cast<int64_t>(L), local = 0;
    for (int l = 0; l < c.n_layers; ++l)
      if (c.layer_local(l)) --managed, ++local;
    pool_half = managed * per_layer + local * std::min<int64_t>(c.sliding_window, n_ctx + 1);
    pool_slots = kv.prefill_chunk > 0 ? 2 * pool_half : pool_half;
    // A later prompt chunk's call attends the pages it recalls as rows after its own in staging.
    const int64_t recalled = kv.recall().on() && kv.prefill_chunk > 0 ? static_cast<int64_t>(kv.recall_pages) * kv.recall_page : 0;
    staging_slots = move_slots = n_ctx + 1 + recalled;
    max_capacity = n_ctx + 1;
  }
  auto slots = [&](const std::string& area, int64_t n) {
    add("kv", area + ".k", static_cast<size_t>(n) * H * k_row);
    add("kv", area + ".v", static_cast<size_t>(n) * H * v_row);
    add("kv", area + ".pos", static_cast<size_t>(n) * H * sizeof(int32_t));
  };
  slots("kv", pool_slots);
  add("kv", "kv.n_held", L * H * sizeof(int32_t));
  if (evicting) slots("staging", staging_slots);
  if (move_slots > 0) slots("move", move_slots);
  if (local_layers) add("kv", "local_drop", H * sizeof(int32_t));
  const bool lin = evicting && kv.taylor();
  const size_t K = evicting ? static_cast<size_t>(kv.centroid_count()) : 0;  // the centroid compensator's
  add("kv", "lin.n", lin || K > 0 ? L * H * sizeof(float) : 0);
  add("kv", "lin.ksum", lin ? L * H * d * sizeof(float) : 0);
  add("kv", "lin.vsum", lin ? L * H * d * sizeof(float) : 0);
  add("kv", "lin.M", lin ? L * H * d * d * sizeof(float) : 0);
  add("kv", "lin.cn", L * H * K * sizeof(float));
  add("kv", "lin.ck", L * H * K * d * sizeof(float));
  add("kv", "lin.cv", L * H * K * d * sizeof(float));
  recall = evicting && kv.recall().on();
  if (recall) {
    store_type = device_kv_type(kv.store_type);
    check_kv_type(kv.store_type, c.head_dim, "recall store type");
    store_row = static_cast<size_t>(elem_row_bytes(store_type, c.head_dim));
    score_pages = (n_ctx + kv.recall_page - 1) / kv.recall_page;
    const size_t M = c.kv_policy_layers().size();  // the layers that evict (local ones drop what they no longer see)
    add("store", "store.k", M * H * ctx * store_row);
    add("store", "store.v", M * H * ctx * store_row);
    add("store", "store.pos", M * H * ctx * sizeof(int32_t));
    add("store", "store.n_held", M * H * sizeof(int32_t));
    // A held choice is attended with the pages from the one last when it was chosen on. Only its
    // every - 1 later decode steps add to the store meanwhile, one row a KV head each (a step
    // evicts more only after a prompt call, which drops the choices, so that step chooses), so
    // at most ceil((every - 1) / page) pages.
    recall_pages_ld = kv.recall_pages + (kv.recall_every > 1 ? 1 + (kv.recall_every - 2 + kv.recall_page) / kv.recall_page : 0);
  }

  // Activations: the residual stream of a whole prompt, one chunk's scratch, the logits of a chunk.
  const size_t dim = static_cast<size_t>(c.dim), qd = static_cast<size_t>(c.q_dim()), kvd = static_cast<size_t>(c.kv_dim());
  // gate and up hold a chunk's rows of the feed-forward, or of a mixture's shared expert.
  const size_t ff = static_cast<size_t>(std::max(c.ffn_dim, c.shared_expert_ffn_dim)), widest = std::max({dim, qd, ff});
  add("activations", "x", ctx * dim * sizeof(float));
  add("activations", "xb", B * dim * sizeof(float));
  add("activations", "q", B * qd * sizeof(float));
  add("activations", "k", B * kvd * sizeof(float));
  add("activations", "v", B * kvd * sizeof(float));
  add("activations", "att", B * qd * sizeof(float));
  add("activations", "gate", B * ff * sizeof(float));
  add("activations", "up", B * ff * sizeof(float));
  add("activations", "act_bf16", B * widest * sizeof(uint16_t));
  if (c.n_expert > 0) {  // the mixture's router logits, one expert's rows in and out, their sum, the routing
    const size_t E = static_cast<size_t>(c.n_expert), used = static_cast<size_t>(c.n_expert_used);
    add("activations", "moe_logits", B * E * sizeof(float));
    add("activations", "moe_rows", B * dim * sizeof(float));
    add("activations", "moe_out", B * dim * sizeof(float));
    add("activations", "moe_acc", B * dim * sizeof(float));
    const size_t lists = B * (used + (c.shared_expert_ffn_dim > 0 ? 1 : 0));  // the shared expert takes every row
    add("activations", "moe_shexp_gate", c.shared_expert_ffn_dim > 0 ? B * sizeof(float) : 0);
    add("activations", "moe_idx", lists * sizeof(int32_t));
    add("activations", "moe_w", lists * sizeof(float));
  }
  add("activations", "logits", B * static_cast<size_t>(c.n_vocab) * sizeof(float));
  add("activations", "tokens", ctx * sizeof(int32_t));
  add("activations", "positions", ctx * sizeof(int32_t));
  add("activations", "inv_freq", d * sizeof(double));  // the global layers' table, then the sliding layers' one
  ptaa_split_len = 256;
  RecallView rc;  // the splits of the pages a step recalls
  if (recall) rc.page = kv.recall_page, rc.max_chosen = recall_pages_ld;
  ptaa_n_splits = ptaa_splits(max_capacity, ptaa_split_len, rc);
  add("activations", "ptaa", ptaa_scratch_floats(c.n_heads, c.head_dim, ptaa_n_splits) * sizeof(float));

  // The policy's statistics and work arrays.
  if (evicting) {
    const size_t rows = static_cast<size_t>(max_capacity), W = static_cast<size_t>(kv.observed());  // observing queries
    const size_t nh = static_cast<size_t>(c.n_heads);
    add("policy", "q_window", W * qd * sizeof(float));
    add("policy", "window_scratch",
        (n_ctx > kv.window ? window_stats_scratch_doubles(c.n_heads, kv.observed(), n_ctx - kv.window) : 0) * sizeof(double));
    add("policy", "totals", 2 * sizeof(double));
    add("policy", "indicator", L * H * ctx * sizeof(float));
    add("policy", "indicator_rows", H * ctx * sizeof(float));  // window_stats' rows before scatter_scores
    add("policy", "uniform_kept", H * ctx);
    add("policy", "vabs", W * nh * 2 * sizeof(double));
    add("policy", "cand_scores", H * rows * sizeof(float));
    add("policy", "flags", H * rows);
    add("policy", "kept_idx", H * rows * sizeof(int32_t));
    add("policy", "evicted_idx", H * rows * sizeof(int32_t));
    add("policy", "counts", 2 * H * sizeof(int32_t));
    add("policy", "victim", H * sizeof(int32_t));
    add("policy", "victim_scratch", victim_scratch_doubles(c.n_heads, c.n_kv_heads, max_capacity) * sizeof(double));
  }
  if (recall) {
    // Scores for a decode step's query rows, or a prompt chunk's call's last kChunkRecallTokens
    // tokens' (in "recall.q", rows by KV head, gathered through "recall.q_idx").
    const size_t score_rows = static_cast<size_t>(c.n_heads) * (kv.prefill_chunk > 0 ? kChunkRecallTokens : 1);
    add("policy", "recall.score", score_rows * static_cast<size_t>(score_pages) * sizeof(float));
    if (kv.prefill_chunk > 0) {
      add("policy", "recall.q", score_rows * d * sizeof(float));
      add("policy", "recall.q_idx", score_rows * sizeof(int32_t));
    }
    add("policy", "recall.select", recall_select_scratch_bytes(c.n_kv_heads, score_pages));
    add("policy", "recall.pages", H * static_cast<size_t>(recall_pages_ld) * sizeof(int32_t));
    add("policy", "recall.n_chosen", H * sizeof(int32_t));
    if (kv.recall_every > 1) {
      const size_t M = c.kv_policy_layers().size(), MH = M * H;
      add("policy", "recall.held", H * sizeof(int32_t));
      add("policy", "hold.uses", MH * sizeof(int32_t));
      add("policy", "hold.n_pages", MH * sizeof(int32_t));
      add("policy", "hold.count", MH * sizeof(int32_t));
      add("policy", "hold.pages", MH * static_cast<size_t>(kv.recall_pages) * sizeof(int32_t));
      add("policy", "hold.u", M * static_cast<size_t>(c.n_heads) * d * sizeof(float));
    }
  }
}

void DevicePlan::add(const std::string& group, const std::string& name, size_t bytes) {
  const bool shared = shared_activations_ && group == "activations";
  size_t& end = shared ? act_total_ : total_;
  entries_.push_back(Entry{name, bytes, end, shared});
  groups_.push_back(group);
  end += arena_align(bytes);
}

const DevicePlan::Entry& DevicePlan::entry(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return e;
  fail("internal: no planned device buffer named " + name);
}

std::string DevicePlan::activation_layout() const {
  // The RoPE table ("inv_freq") follows n_ctx (LongRoPE) and is written by each context that
  // shares the area: contexts of other context sizes must not share it.
  std::string layout = "n_ctx " + std::to_string(n_ctx);
  for (const Entry& e : entries_)
    if (e.shared) layout += ";" + e.name + " " + std::to_string(e.bytes);
  return layout;
}

size_t DevicePlan::group_bytes(const std::string& group) const {
  size_t n = 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (groups_[i] == group) n += arena_align(entries_[i].bytes);
  return n;
}

std::string DevicePlan::breakdown() const {
  return " (weights " + mib(group_bytes("weights")) + ", KV cache " + mib(group_bytes("kv")) +
         (recall ? ", recall store " + mib(group_bytes("store")) : std::string()) + ", activations " +
         (shared_activations_ ? "shared" : mib(group_bytes("activations"))) + ", policy " + mib(group_bytes("policy")) + " MiB)";
}

std::string DevicePlan::summary() const { return mib(total_) + " MiB" + breakdown(); }

void DevicePlan::check_fits() const {
  require_device_memory(total_,
                        "a context of " + std::to_string(n_ctx) + " tokens (batch " + std::to_string(n_batch) + ", KV policy " +
                            kv.policy + (evicting ? ", budget " + std::to_string(kv.budget) : std::string()) + ") needs",
                        "; lower the context size or the KV budget", breakdown());
}

}  // namespace slake::gpu
