// The device memory of a DeviceContext, planned before anything is allocated: every buffer the
// forward pass, the KV cache and the eviction policy will ever use, for the context size, budget
// and batch known at the start. The context then makes one allocation of total_bytes() (the arena)
// and carves it up exactly as planned, so the peak device memory of a run is a property of the
// plan. A plan that does not fit the device's free memory is refused (check_fits) with the numbers.
// A plan with shared activations leaves its activations out of the arena: they are planned in an
// area of their own (activation_bytes()), which the contexts of one model and layout share
// (shared_device_activations), since they run one at a time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels.h"
#include "slake/context.h"
#include "slake/model/model.h"

namespace slake::gpu {

constexpr size_t kArenaAlign = 256;
inline size_t arena_align(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// Throws slake::Error "<what> N MiB<detail> of device memory, but the device has F MiB free of T
// MiB<advice>" (what: "the model's weights need") when `bytes` exceed the device's free memory
// (before an allocation).
void require_device_memory(size_t bytes, const std::string& what, const std::string& advice = "", const std::string& detail = "");

// Bytes a weight takes on the device: matrices and the embedding table in bf16, 1-D norms in fp32.
size_t device_weight_bytes(const TensorView& t, bool matrix);
// The row type the kernels store a KV cache type as (check_kv_type_on_cuda refuses the others).
ElemType device_kv_type(KvType t);

class DevicePlan {
 public:
  struct Entry {
    std::string name;
    size_t bytes;   // as requested
    size_t offset;  // in the arena, or in the shared activations, kArenaAlign-aligned
    bool shared;    // in the shared activations
  };

  // Resolves n_ctx (0: the model's training context) and the KV policy's defaults like Context.
  // Without `with_weights` the arena holds no weights (the context shares a DeviceWeights); with
  // `shared_activations` it holds no activations either (the context shares a DeviceActivations).
  DevicePlan(const Model& model, const ContextParams& params, bool with_weights = true, bool shared_activations = false);

  size_t total_bytes() const { return total_; }  // the arena
  size_t activation_bytes() const { return act_total_; }  // the shared activations (0 when not shared)
  const Entry& entry(const std::string& name) const;  // throws for an unknown name
  // The shared activations' layout: contexts whose layouts are equal can share them.
  std::string activation_layout() const;
  const std::vector<Entry>& entries() const { return entries_; }
  // Sums by group: "weights", "kv" (exact cache, staging, linear states), "store" (the recall
  // store), "activations", "policy".
  size_t group_bytes(const std::string& group) const;
  std::string summary() const;  // "total X MiB (weights .., kv .., activations .., policy ..)"

  // Throws slake::Error naming the plan and the device's free memory when total_bytes() does not fit.
  void check_fits() const;

  int n_ctx, n_batch;
  KvPolicyParams kv;  // resolved
  bool evicting;      // the policy evicts (budget > 0 and not full)
  bool local_layers;  // the model has local (sliding) and global layers: the local ones keep their window
  ElemType type_k, type_v;   // the stored rows' types (kv.type_k, kv.type_v)
  size_t k_row, v_row;       // bytes of one stored key / value row
  // Token slots of the exact cache (one slot: a key, a value and a position for every KV head):
  // the pool shared by the layers, the prompt layer's staging area and the relocation area, each
  // planned as three buffers <area>.k, <area>.v, <area>.pos.
  int64_t pool_slots, staging_slots, move_slots;
  int64_t pool_half;  // a prefill chunk's layers go into one half (pool_slots without chunks)
  int max_capacity;  // most rows one layer's head can hold
  int ptaa_split_len, ptaa_n_splits;
  // The recall store (kv.recall(), docs/algorithm.md §9): per layer the policy manages
  // (ModelConfig::kv_policy_layers) and KV head n_ctx rows of
  // store_type ("store.k", "store.v", "store.pos", group "store"), in pages of kv.recall_page;
  // each decode step scores score_pages pages a query head ("recall.score") and attends
  // kv.recall_pages of them a KV head ("recall.pages"), or with a choice held
  // (kv.recall_every > 1: "hold.*", per layer the policy manages and KV head) those and the pages
  // written since it was made: at most recall_pages_ld of them.
  bool recall = false;
  int recall_pages_ld = 0;
  ElemType store_type = ElemType::F32;
  size_t store_row = 0;  // bytes of one stored key or value row
  int64_t score_pages = 0;

 private:
  void add(const std::string& group, const std::string& name, size_t bytes);
  std::string breakdown() const;  // " (weights .., KV cache .., activations .., policy .. MiB)"
  std::vector<Entry> entries_;
  std::vector<std::string> groups_;
  size_t total_ = 0, act_total_ = 0;
  bool shared_activations_ = false;
};

}  // namespace slake::gpu
