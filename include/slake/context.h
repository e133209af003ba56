// An inference session over a loaded model: the KV cache, scratch buffers and the forward pass.
// A prompt is processed layer by layer over all its tokens (in chunks of n_batch tokens), so that
// per-layer KV decisions can be taken once a layer has seen the whole prompt; a single token is
// the same path with one token.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "slake/kv/kv_cache.h"
#include "slake/kv/kv_evictor.h"
#include "slake/model/model.h"
#include "slake/cpu/rope.h"
#include "slake/cpu/thread_pool.h"
#include "slake/cpu/cpu_weights.h"

namespace slake {

struct ContextParams {
  int n_ctx = 0;      // tokens the context can hold; 0: the model's training context
  int n_threads = 0;  // 0: all hardware threads
  int n_batch = 256;  // tokens per chunk inside a layer
  KvPolicyParams kv;  // eviction policy; "full" keeps everything
  // A thread pool to share with other contexts (it must outlive them); null: the context makes
  // its own of n_threads. Contexts decoded together (decode_batch) share one.
  ThreadPool* pool = nullptr;
};

// Evaluates `tokens` one at a time through eval_one(token, logits or null), writing the logits as
// a multi-token eval does: every token's when all_logits, else the last one's. An evicting
// context decodes tokens added to a non-empty cache this way, so each is scored and evicted alone.
template <class EvalOne>
void eval_one_at_a_time(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits,
                        EvalOne&& eval_one) {
  std::vector<float> step;
  if (logits) logits->clear();
  for (size_t t = 0; t < tokens.size(); ++t) {
    const bool want = logits && (all_logits || t + 1 == tokens.size());
    eval_one(tokens[t], want ? &step : nullptr);
    if (want) logits->insert(logits->end(), step.begin(), step.end());
  }
}

// Throws unless `tokens` may be evaluated after n_past tokens in a context of n_ctx: not empty,
// within the context, every id in the vocabulary. Both backends check an eval this way.
void check_eval_tokens(const ModelConfig& c, const std::vector<int32_t>& tokens, int n_past, int n_ctx);

// Throws unless a chunk of n tokens may follow n_past tokens of a prompt prefilled in chunks under
// p (resolved): a later chunk's last queries score it, so it needs an evicting policy and at least
// a window of tokens (prefill_chunk_length's cut).
void check_prompt_chunk(const KvPolicyParams& p, int n_past, int n);

// Evaluates a prompt of `tokens` in the chunks prefill_chunk_length cuts (p resolved) through
// eval_chunk(chunk's tokens, logits or null), writing the logits as a one-pass eval does: every
// token's when all_logits, else the last one's. Both backends take a chunked prefill this way.
template <class EvalChunk>
void eval_in_chunks(const KvPolicyParams& p, const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits,
                    EvalChunk&& eval_chunk) {
  const int n = static_cast<int>(tokens.size());
  std::vector<float> part, out;
  for (int t0 = 0, len = 0; t0 < n; t0 += len) {
    len = prefill_chunk_length(p, t0, n);
    const bool keep = logits && (all_logits || t0 + len == n);
    eval_chunk(std::vector<int32_t>(tokens.begin() + t0, tokens.begin() + t0 + len), keep ? &part : nullptr);
    if (keep) out.insert(out.end(), part.begin(), part.end());
  }
  if (logits) *logits = std::move(out);
}

// What a context holds after evaluating tokens (its cache, its evictor's state, its position), kept
// apart from it: the server's prompt cache saves these and restores one into any context of the
// same model, size, policy and chunk size. Its storage is tight (what is held, not the capacity).
struct ContextState {
  KvCache kv;
  KvEvictor evictor;
  int n_past = 0;
  const Model* model = nullptr;
  int n_ctx = 0, n_batch = 0;
  KvPolicyParams params;
  size_t bytes() const { return kv.bytes_allocated() + kv.store_bytes_used(); }
};

class Context {
 public:
  Context(const Model& model, const ContextParams& params);

  // Runs `tokens` at positions n_past() .. n_past()+n-1. Writes the logits of every token
  // ([n][n_vocab]) when all_logits, else of the last one only ([n_vocab]); logits may be null.
  void eval(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits = false);

  // Empties the context and evaluates `tokens` from position 0, giving the output of the final
  // norm for each ([n][dim]): the hidden states that an embedding pools.
  void hidden_states(const std::vector<int32_t>& tokens, std::vector<float>* out);

  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }
  const Model& model() const { return model_; }
  const KvCache& kv_cache() const { return kv_; }
  const KvEvictor& evictor() const { return evictor_; }
  // One chunk of a prompt prefilled in chunks (KvPolicyParams::prefill_chunk), after the chunks
  // before it, as eval's chunked prefill takes it: observed, and each layer evicted before the
  // next. The caller cuts the prompt with prefill_chunk_length (the server, to interleave the
  // chunks with other slots' decode steps); the logits are the chunk's last token's.
  void eval_prompt_chunk(const std::vector<int32_t>& tokens, std::vector<float>* logits);
  ThreadPool& pool() { return *pool_; }
  void reset();
  // Makes this context hold what `other` holds (its cache, evictor and position), as if it had
  // evaluated the same tokens: n > 1 replies to one prompt share its prefill. Both must run one
  // model with the same size, policy and chunk size; throws slake::Error otherwise, before
  // anything is changed.
  void copy_state_from(const Context& other);
  // The same through a saved state (save_state: a copy of what this context holds).
  std::shared_ptr<const ContextState> save_state() const;
  // A state of this context's shape that holds nothing (what a state file is read into).
  std::shared_ptr<ContextState> empty_state() const;
  const ContextParams& params() const { return params_; }
  void restore_state(const ContextState& state);
  // Keeps the first n tokens, as if only they had been evaluated, where nothing was evicted,
  // dropped or summarised (a full cache of a non-KIVI type, KvCache::truncate). Returns false,
  // changing nothing, otherwise.
  bool truncate(int n);
  bool can_truncate() const { return !params_.kv.evicts() && kv_.can_truncate(); }

  // One decode step of several sequences, and one prompt into several contexts (batch_decode.h).
  friend void decode_batch(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens,
                           std::vector<std::vector<float>>* logits);
  friend void prefill_shared(const std::vector<Context*>& ctxs, const std::vector<int32_t>& tokens, std::vector<float>* logits);

 private:
  // eval, with `also`: empty contexts that take the same prompt (prefill_shared). Each appends
  // the same keys and values, observes the same queries and evicts with its own policy.
  // `hidden`, when given, gets every token's final-norm output instead of logits.
  void eval_into(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits,
                 const std::vector<Context*>& also, std::vector<float>* hidden = nullptr);
  // eval_into's forward pass of `tokens` after the n_past() held ones. prompt: a prompt (observed
  // and evicted at prefill), into an empty cache or after the chunks before it; else decode steps.
  void eval_rows(const std::vector<int32_t>& tokens, std::vector<float>* logits, bool all_logits, const std::vector<Context*>& also,
                 std::vector<float>* hidden, bool prompt);
  // prompt: a prompt (observed for eviction); else decode steps.
  void run_layer(int layer, float* x, int n_tokens, const int32_t* pos, bool prompt, const std::vector<Context*>& also);
  // The attention shape of a layer (its own window on models with local and global layers).
  AttentionShape layer_shape(int layer) const;

  const Model& model_;
  const CpuWeights& weights_;  // the model's matrices as the CPU kernels read them (cpu/cpu_weights.h)
  ContextParams params_;
  int n_ctx_;
  int n_past_ = 0;
  std::unique_ptr<ThreadPool> own_pool_;  // when params.pool is null
  ThreadPool* pool_;
  Rope rope_;
  AttentionShape shape_;
  KvCache kv_;
  KvEvictor evictor_;
  // Per-chunk scratch.
  std::vector<float> xb_, q_, k_, v_, att_, gate_, up_;
};

}  // namespace slake
