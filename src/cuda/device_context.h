// The forward pass on the device: the same model, context parameters and KV policies as
// slake::Context (src/context.cpp), with the kernels of kernels.h, the GEMMs of gemm.h and one
// planned arena of device memory (device_plan.h). Weights are uploaded once in bf16 (quantised
// types dequantised at load); keys, values, activations and the linear states never leave the
// device. The eviction policy's decisions (layer budgets) are taken on the host from the small
// per-layer statistics the kernels compute (the CAKE totals, SLAKE's VABS terms), with the same
// allocator as the CPU (slake::allocate_budgets); token selection, compaction and absorption into
// the linear state run on the device.
//
// Policies: full, slake, cake, snapkv, pyramidkv and streaming (cascading eviction); h2o is refused.
// A prompt prefilled in chunks (--prefill-chunk) runs each chunk as a prompt into what the chunks
// before it kept, as the CPU does. With a recall store (--kv-recall-pages) every evicted row joins
// the layer's store in device memory and each decode step attends the pages its query ranks
// highest by their keys (recall.cuh), as the CPU's RecallScore::Keys, and so do the calls of a
// prompt chunk after the first, and a decode step's choice may serve the steps after it
// (--kv-recall-every) as RecallStore::holds_choice rules; the rest of §9 (other page scores, the
// Taylor cover, mapped files) is the CPU's.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/device_activations.h"
#include "cuda/device_plan.h"
#include "cuda/device_weights.h"
#include "cuda/gemm.h"
#include "kernels.h"
#include "slake/context.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/kv_recall.h"
#include "slake/model/model.h"

namespace slake::gpu {

class DeviceContext {
 public:
  // Plans, checks the plan against the device's free memory (refusing before any allocation),
  // allocates the arena and uploads the weights into it.
  DeviceContext(const Model& model, const ContextParams& params);
  // The same with the model's weights shared with other contexts (shared_device_weights), and its
  // activations with those of the same layout (shared_device_activations): the arena holds this
  // context's cache and policy state only. Contexts that share them run one at a time.
  DeviceContext(const Model& model, const ContextParams& params, std::shared_ptr<const DeviceWeights> weights);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // As slake::Context::eval, a prompt in chunks of KvPolicyParams::prefill_chunk included.
  void eval(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits = false);
  // As slake::Context::eval_prompt_chunk: one chunk of a prompt prefilled in chunks, after the
  // chunks before it (the caller cuts them with prefill_chunk_length).
  void eval_prompt_chunk(const std::vector<int32_t>& tokens, std::vector<float>* logits);

  // One decode step of several contexts, token i into ctxs[i] and its logits into (*logits)[i]
  // (device_batch.cpp): their rows go through each layer's GEMMs together, the weights read once
  // for all, while each row's KV hooks and attention run on its own context. The contexts share
  // one upload of the weights (shared_device_weights) and one context size, and each holds a
  // prompt. Each result is ctxs[i]->eval({tokens[i]})'s (on a GPU up to the order in which the
  // GEMM of several rows sums).
  static void decode_batch(const std::vector<DeviceContext*>& ctxs, const std::vector<int32_t>& tokens,
                           std::vector<std::vector<float>>* logits);
  // Why decode_batch cannot take this context in a batch whose first context is `lead` (null: it
  // can): another model or upload of the weights, another context size (the lead's RoPE table
  // rotates every row, and it follows n_ctx: LongRoPE), or no prompt yet.
  const char* batch_refusal(const DeviceContext& lead) const;

  int n_past() const { return n_past_; }
  int n_ctx() const { return plan_.n_ctx; }
  const Model& model() const { return model_; }
  void reset();

  const DevicePlan& plan() const { return plan_; }
  // The arena and the shared weights it reads: every byte of device memory the context uses
  // (cuBLAS's own workspace and the CUDA runtime's context are not part of it).
  size_t peak_device_bytes() const { return plan_.total_bytes() + (shared_ ? shared_->bytes() : 0) + (acts_ ? acts_->size() : 0); }
  // As KvCache::bytes_used / peak_bytes_used: held tokens' keys, values and positions plus the
  // linear states that hold anything and the recall stores' rows.
  size_t kv_bytes_used() const;
  // As KvCache::store_bytes_used: the recall stores' part of kv_bytes_used.
  size_t kv_store_bytes() const;
  size_t kv_peak_bytes() const { return kv_peak_; }
  int64_t tokens_held() const;
  int layer_tokens_held(int layer) const { return layers_[static_cast<size_t>(layer)].held; }
  const std::vector<int64_t>& budgets() const { return budgets_; }
  const char* gemm_name() const { return gemm_->name(); }

 private:
  struct Layer {  // a layer's cache in the pool
    int64_t off = 0;  // first slot in the pool
    int cap = 0;      // rows per KV head
    int held = 0;     // rows held by every KV head (eviction keeps the heads of a layer equal)
    bool lin = false; // its linear states hold anything
    int stored = 0;   // rows in every KV head's recall store (eviction keeps them equal too)
  };

  template <typename T>
  T* at(const char* name) const {
    const DevicePlan::Entry& e = plan_.entry(name);
    return reinterpret_cast<T*>(static_cast<char*>(e.shared ? static_cast<void*>(acts_->get()) : arena_) + e.offset);
  }
  // A planned cache area's three buffers (device_plan: <name>.k, <name>.v, <name>.pos).
  struct CacheArea {
    uint8_t* k = nullptr;
    uint8_t* v = nullptr;
    int32_t* pos = nullptr;
  };
  CacheArea find_area(const std::string& name) const;
  // The layer-shaped view of an area from slot `off` on, with `cap` rows per KV head.
  KvLayerMut area(const CacheArea& a, int64_t off, int cap) const;
  KvLayerMut pool_layer(int l) const;
  KvLayerMut staging() const;
  KvLayerView view(const KvLayerMut& m, int l) const;
  // Layer l's recall store (plan_.recall): n_ctx rows per KV head, layer.stored of them held.
  KvLayerMut store_layer(int l) const;
  KvLayerView store_view(int l) const;
  // The rows eviction takes out of layer l join its store, in order: rows idx[g * ld + r], r <
  // count, of src; or (count < 0) row idx[g] of each head, a decode step's victims.
  void store_evicted(int l, const KvLayerView& src, const int32_t* idx, int64_t ld, int count);
  // Layer l's store pages scored by their keys for `rows` query rows (q, rows of a head's group
  // adjacent), into "recall.score".
  // skip: as recall_page_scores' (the heads whose choice holds).
  void score_pages(int l, const float* q, int rows, const int32_t* skip = nullptr);
  // Each KV head's pages chosen from those scores for `rows` query rows, into "recall.pages" /
  // "recall.n_chosen": head g's rows are score rows first_row + g * head_rows + r (recall_select);
  // returns the most a head may have chosen.
  int select_pages(int l, int rows, int64_t first_row = 0, int64_t head_rows = 0, const int32_t* skip = nullptr);
  // Decode steps hold their choices (--kv-recall-every above 1), in "hold.*"; layer l's part. As
  // on the CPU, not for a GQA group of more than RecallStore::kHoldRowsMost query rows.
  bool holds() const {
    return plan_.recall && plan_.kv.recall_every > 1 && model_.cfg.n_heads / model_.cfg.n_kv_heads <= RecallStore::kHoldRowsMost;
  }
  RecallHold hold(int l) const;
  // Layer l's heads hold no choice: before a call that is not a decode step, as the CPU's.
  void forget_choices(int l);
  // A decode step's attention of layer l with the pages each KV head chose (max_chosen at most).
  void attend_chosen(int l, float* att, const float* q, int32_t qpos, const KvLayerView& kvv, int max_held, int max_chosen);
  // A decode step's attention of layer l with the pages each KV head recalls from its store.
  void attend_recalled(int l, float* att, const float* q, int32_t qpos, const KvLayerView& kvv, int max_held);
  // A later prompt chunk's attention of rows t0..t0+nb-1 of layer l (their keys and values already
  // in staging, kvv; positions as attend's) with the pages each KV head recalls, as the CPU's
  // attention_prefill with a store: the store is scored once for the call's last
  // kChunkRecallTokens tokens; their rows together choose the pages of the earlier rows
  // (attend_chunk_head), and each of those tokens' rows its own, as a decode step's.
  void attend_chunk_recalled(int l, int t0, int nb, const int32_t* pos, const int32_t* pos_host, const KvLayerView& kvv, float* att,
                             const float* q);
  // The call's first `head` rows, with the pages chosen (select_pages; max_pages a head at most).
  void attend_chunk_head(int l, int head, const int32_t* pos, float* att, const float* q, int max_pages);
  LinearStateView lin(int l) const;
  int centroids() const;  // K of the centroid compensator, 0 without one
  void set_held(int l, int held);
  void note_usage();
  // The tokens at positions n_past_.. through every layer; `prompt`: a prompt into an empty cache
  // or a chunk of one (observed and evicted), else decode rows.
  void eval_rows(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits, bool prompt);
  // A later prompt chunk's layer l: the rows it holds copied to the staging area, before the chunk's.
  void stage_held(int l);
  void check_pool(int64_t end) const;  // slots up to `end` lie in the half of the pool being filled

  // Runs the model's layer definition (slake/model/layer.h) over the rows in chunks of n_batch.
  void run_layer(int l, int n, const int32_t* pos_host, bool prompt);
  // The KV hooks and attention of the rows an Ops is bound to: att written from q, k, v.
  using AttendRows = std::function<void(float* att, float* q, float* k, float* v)>;
  // The layer over rows t0..t0+nb-1 of `x` (nb <= n_batch), with `attend` as its attention.
  void run_layer_rows(int l, int t0, int nb, const AttendRows& attend);
  class Ops;  // its LayerOps
  // The logits of rows first..first+rows-1 of `x`, rows * n_vocab floats.
  void output_logits(int first, int rows, std::vector<float>* logits);
  // The KV hooks and attention of rows t0..t0+nb-1 (q, k, v after RoPE; att written), at the
  // positions `pos` on the device (rows t0.. of "positions", or a batch lead's) and pos_host[t0..].
  void attend(int l, int t0, int nb, const int32_t* pos, const int32_t* pos_host, bool prompt, float* att, float* q, float* k, float* v);
  void on_layer_done(int l);
  // Evicts layer l (rows in `src`) to `budget` prefix tokens, writing the kept rows to the pool at
  // `off` with `cap` rows per head.
  void relocate(int l, const KvLayerMut& src, int64_t budget, int64_t off, int cap);
  void decode_evict(int l, const float* q, int32_t qpos);  // q: the decoded row's query
  int64_t decode_budget(int l) const;
  // The layer's index among those the KV policy manages (ModelConfig::kv_policy_layers), or -1.
  int slot(int l) const { return slots_[static_cast<size_t>(l)]; }
  // Rows per KV head a seen layer keeps in the pool: its budget + window + 1, or a local layer's window.
  int layer_capacity(int k) const;
  // The prompt's layer l: its window statistics, preference and the cascade's new budgets.
  void score_layer(int l);
  // Every seen layer evicted to its budget and the pool repacked, layer l placed from staging.
  void repack(int l);

  const Model& model_;
  DevicePlan plan_;
  float rope_mscale_ = 1.0f;  // Rope::mscale() of this context
  KvPolicyParts parts_{};
  std::unique_ptr<Gemm> gemm_;
  void* arena_ = nullptr;
  CacheArea pool_, staging_, move_;  // staging and move: evicting plans only
  std::shared_ptr<const DeviceWeights> shared_;  // null: the weights are in the arena
  std::shared_ptr<DeviceActivations> acts_;      // null: the activations are in the arena
  WeightsOnDevice w_;
  std::vector<Layer> layers_;
  std::vector<int> slots_;  // [layer]: slot(), from ModelConfig::kv_policy_layers
  int n_managed_ = 0;       // layers the KV policy manages
  int n_past_ = 0;
  // The current prompt or prompt chunk (eviction): its positions end at S_.
  int S_ = 0;
  bool prompt_evicts_ = false;
  bool continues_ = false;  // a chunk after the first: each layer's budget capped by its candidates
  int64_t pool_base_ = 0;   // the first slot of the half of the pool the prompt's layers go into
  std::vector<double> scores_;
  std::vector<int64_t> budgets_;
  int64_t pool_used_ = 0;
  size_t kv_peak_ = 0;
  int q_idx_tokens_ = 0;  // the tokens "recall.q_idx" was written for (attend_chunk_recalled)
};

}  // namespace slake::gpu
