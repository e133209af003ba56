#include "model_instance.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <ctime>

#include "slake/error.h"
#include "slake/kv/kv_cache.h"

namespace slake::server {

namespace {

// The full KV cache of `tokens` tokens under the options' cache types.
size_t full_cache_bytes(const ModelConfig& c, const KvPolicyParams& kv, int tokens) {
  return KvCache::planned_bytes(c.n_layers, c.n_kv_heads, c.head_dim, tokens, kv.type_k, kv.type_v);
}

}  // namespace

size_t ModelInstance::planned_bytes(const Model& m, const ServerOptions& o) {
  const ModelConfig& c = m.cfg;
  const KvPolicyParams kv = resolve_kv_policy(o.kv.params, false, &c);
  const int total = o.n_ctx > 0 ? o.n_ctx : c.n_ctx_train;
  std::error_code ec;
  const auto file = std::filesystem::file_size(o.model_path, ec);
  const size_t weights = ec ? m.weight_bytes() : static_cast<size_t>(file);
  const size_t limit = kv_memory_bytes(o, full_cache_bytes(c, kv, total));
  if (limit > 0) return weights + limit;  // the prompt cache is counted in it
  const size_t slots = static_cast<size_t>(o.n_parallel) * full_cache_bytes(c, kv, slot_context(o, c.n_ctx_train));
  return weights + slots + (o.cache_ram_mib > 0 ? static_cast<size_t>(o.cache_ram_mib * 1048576.0) : 0);
}

ModelInstance::ModelInstance(const ServerOptions& o, std::unique_ptr<Model> model) : o_(o), model_(std::move(model)) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!model_) model_ = load_model(o.model_path);
  const ModelConfig& c = model_->cfg;
  try {
    tokenizer_ = std::make_unique<Tokenizer>(model_->vocab);
  } catch (const Error& e) {
    fail(o.model_path + ": " + e.what());
  }
  chat_ = std::make_unique<ChatPrompter>(*tokenizer_, o.chat_template, o.chat_template_file);
  sc_.n_slots = o.n_parallel;
  sc_.n_ctx = slot_context(o, c.n_ctx_train);
  sc_.n_batch = o.n_batch;
  sc_.queue_max = o.queue_max;
  sc_.n_threads = o.n_threads;
  sc_.kv = resolve_kv_policy(o.kv.params, false, &c);
  sc_.cache_ram = o.cache_ram_mib < 0 ? SIZE_MAX : static_cast<size_t>(o.cache_ram_mib * 1048576.0);
  const int total = o.n_ctx > 0 ? o.n_ctx : c.n_ctx_train;
  sc_.kv_memory = kv_memory_bytes(o, full_cache_bytes(c, sc_.kv, total));
  sc_.backend = o.backend;
  scheduler_ = std::make_unique<Scheduler>(*model_, *tokenizer_, sc_);
  // The --kv-* flags as given: a request's own policy or budget gets that policy's defaults (its
  // window) from resolve_kv_defaults, not the server default's resolved ones.
  env_ = std::make_unique<ServerEnv>(ServerEnv{{model_id(o), *tokenizer_, *chat_, c, sc_.n_ctx, o.kv.params,
                                                longest_piece_bytes(tokenizer_->vocab()),
                                                reasoning_format_from_name(o.reasoning_format), o.chat_template_kwargs},
                                               *scheduler_,
                                               counters_,
                                               o.api_key,
                                               static_cast<long long>(std::time(nullptr)),
                                               o.model_path,
                                               split_list(o.cors_origins),
                                               split_list(o.alias)});
  embedder_ = std::make_unique<Embedder>(*model_, sc_.n_ctx, o.n_threads, pooling_from_name(o.pooling));
  env_->embedder = embedder_.get();
  env_->webui = !o.no_webui;
  env_->slot_save_path = o.slot_save_path;
  service_ = std::make_unique<OpenAiService>(*env_);
  load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

ModelInstance::~ModelInstance() {
  if (scheduler_) scheduler_->stop();
}

std::string ModelInstance::describe(const std::string& prefix) const {
  const ModelConfig& c = model_->cfg;
  const int total = o_.n_ctx > 0 ? o_.n_ctx : c.n_ctx_train;
  char line[4096];
  std::snprintf(line, sizeof line,
                "%s%s: %d layers, dim %d, vocab %d, %.1f MiB of weights, loaded in %.0f ms\n"
                "%s%d slots of %d tokens (-c %d %s; full KV cache %.1f MiB each, keys %s, values %s), KV policy %s, "
                "KV memory %s, chat template %s",
                prefix.c_str(), o_.model_path.c_str(), c.n_layers, c.dim, c.n_vocab, model_->weight_bytes() / 1048576.0, load_ms_,
                prefix.c_str(), sc_.n_slots, sc_.n_ctx, total, o_.kv_unified ? "unified: each slot may hold it all" : "split evenly",
                full_cache_bytes(c, sc_.kv, sc_.n_ctx) / 1048576.0, kv_type_name(sc_.kv.type_k),
                kv_type_name(sc_.kv.type_v),
                sc_.kv.evicts() ? (sc_.kv.policy + " budget " + std::to_string(sc_.kv.budget)).c_str() : "full",
                sc_.kv_memory ? (std::to_string(sc_.kv_memory >> 20) + " MiB").c_str() : "no limit",
                chat_->describe().c_str());
  return line;
}

}  // namespace slake::server
