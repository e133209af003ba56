// LayerOps on the CPU: the kernels of slake/cpu/ops.h over a chunk of rows held in float
// buffers. The attention operation is the caller's (a Context's KV hooks for one sequence, or one
// per sequence in a batched decode step).
#pragma once
#include <cstdint>
#include <functional>

#include "slake/cpu/rope.h"
#include "slake/cpu/thread_pool.h"
#include "slake/model/layer.h"

namespace slake {

// Where each activation's rows start (row t of an activation is at its pointer + t * width).
struct CpuActs {
  float *x, *xb, *q, *k, *v, *att, *gate, *up;
};

class CpuLayerOps final : public LayerOps {
 public:
  // out, q, k, v: the rows' buffers of attention's operands.
  using Attend = std::function<void(float* out, float* q, float* k, float* v)>;
  // n rows at positions pos; matmuls run over at most `matmul_rows` rows at a time (batch_decode.h
  // says why a batch does that); layer `layer`, whose CPU weights are `w`.
  CpuLayerOps(const ModelConfig& c, int layer, const LayerWeights& w, const CpuActs& a, int64_t n, const int32_t* pos,
              const Rope& rope, int64_t matmul_rows, ThreadPool& pool, Attend attend)
      : c_(c), layer_(layer), w_(w), a_(a), n_(n), pos_(pos), rope_(rope), matmul_rows_(matmul_rows), pool_(pool),
        attend_(std::move(attend)) {}

  void rmsnorm(Act out, Act in, Weight w, float eps) override;
  void matmul(Act out, Act in, Weight w) override;
  void add_bias(Act a, Weight b) override;
  void rmsnorm_heads(Act a, Weight w, int n_heads, float eps) override;
  void rope(Act a, int n_heads) override;
  void attention(Act out, Act q, Act k, Act v) override;
  void swiglu(Act a, Act b) override;
  void geglu(Act a, Act b) override;
  void add(Act x, Act y) override;
  void moe_ffn(Act x, Act in) override;

 private:
  float* ptr(Act a) const;
  // out = in W^T for n rows, at most matmul_rows at a time.
  void rows_times(float* out, const float* in, int64_t n, const TensorView& W);
  // a = fn(a, b) row by row (the gated activations).
  void gated(Act a, Act b, void (*fn)(float*, const float*, const float*, int64_t));
  const TensorView& weight(Weight w) const;  // throws for a weight the model lacks
  const TensorView& find_weight(Weight w) const;

  const ModelConfig& c_;
  int layer_;
  const LayerWeights& w_;
  CpuActs a_;
  int64_t n_;
  const int32_t* pos_;
  const Rope& rope_;
  int64_t matmul_rows_;
  ThreadPool& pool_;
  Attend attend_;
};

}  // namespace slake
