// A model's layer as one definition that every backend runs. The definition (src/models/, one file
// per architecture) states the sequence of operations, the weights each reads and the
// hyperparameters; a backend implements LayerOps over its own buffers and kernels for one chunk of
// rows (tokens) of one layer. The KV hooks (store, observe, evict, compensate, attend) are one
// operation, `attention`, so every policy runs wherever the layer runs.
//
// Backends: the CPU single-sequence and batched paths (src/cpu/cpu_layer_ops.h, used by
// src/context.cpp and src/batch_decode.cpp) and the CUDA device context
// (src/cuda/device_context.cpp).
#pragma once
#include <cstdint>

#include "slake/model/model.h"

namespace slake {

// The activations of the rows a LayerOps is bound to. Each backend owns their storage.
enum class Act { X, XB, Q, K, V, Att, Gate, Up };
// A layer's weights, by role.
enum class Weight { AttnNorm, Wq, Wk, Wv, Wo, FfnNorm, Gate, Up, Down, Bq, Bk, Bv, QNorm, KNorm, AttnPostNorm, FfnPostNorm };

// Floats per row of an activation.
int64_t act_width(const ModelConfig& c, Act a);

class LayerOps {
 public:
  virtual ~LayerOps() = default;
  // out = in / rms(in) * w, row by row (out may be in).
  virtual void rmsnorm(Act out, Act in, Weight w, float eps) = 0;
  // out = in w^T.
  virtual void matmul(Act out, Act in, Weight w) = 0;
  // a += b on every row (a bias vector as wide as a's rows).
  virtual void add_bias(Act a, Weight b) = 0;
  // RMSNorm of each head (head_dim wide) of rows that are n_heads heads each, in place, by w
  // ([head_dim]).
  virtual void rmsnorm_heads(Act a, Weight w, int n_heads, float eps) = 0;
  // Rotates the first n_heads heads of each row by the row's position (with the layer's RoPE
  // frequencies: ModelConfig::layer_local).
  virtual void rope(Act a, int n_heads) = 0;
  // The KV hooks and attention: stores the rows' keys and values in the layer's cache, lets the
  // policy observe the queries (prompt) or evict (decode), and writes attention over the cache
  // (within the layer's window: ModelConfig::layer_window).
  virtual void attention(Act out, Act q, Act k, Act v) = 0;
  // a = silu(a) * b.
  virtual void swiglu(Act a, Act b) = 0;
  // a = gelu(a) * b, GELU's tanh approximation (Gemma's gelu_pytorch_tanh).
  virtual void geglu(Act a, Act b) = 0;
  // x += y.
  virtual void add(Act x, Act y) = 0;
  // x += the mixture of experts over the rows of `in`: the layer's router and moe_route
  // (slake/model/moe.h) choose ModelConfig::n_expert_used experts per row, each a SwiGLU
  // feed-forward (down(silu(gate(in)) * up(in))), and their outputs are added in their weights.
  virtual void moe_ffn(Act x, Act in) = 0;
};

// The layer of one architecture.
using LayerFn = void (*)(const ModelConfig& c, LayerOps& ops);

// The layer definition of c.arch; throws slake::Error for an architecture without one.
LayerFn layer_for(const ModelConfig& c);
// Runs one layer of c's architecture over the rows `ops` is bound to.
inline void run_layer(const ModelConfig& c, LayerOps& ops) { layer_for(c)(c, ops); }

}  // namespace slake
