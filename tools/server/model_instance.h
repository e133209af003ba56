// One model served: its weights, tokenizer, chat template, slots (scheduler.h), embedder and
// endpoints (http_routes.h), built from slake-server's options. slake-server serves one; in router
// mode (model_router.h) it loads and unloads several while it runs.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "embeddings.h"
#include "http_routes.h"
#include "metrics.h"
#include "scheduler.h"
#include "server_options.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"

namespace slake::server {

class ModelInstance {
 public:
  // `model` is o.model_path loaded (load_model); null: loaded here. Throws slake::Error.
  explicit ModelInstance(const ServerOptions& o, std::unique_ptr<Model> model = nullptr);
  // Stops the slots: requests still running end with an error.
  ~ModelInstance();
  ModelInstance(const ModelInstance&) = delete;
  ModelInstance& operator=(const ModelInstance&) = delete;

  // The memory serving `m` with options `o` plans for before it is built: its file (mapped whole:
  // weights and vocabulary; a Hugging Face folder: its weights), the KV caches of its slots (all of
  // --kv-memory when given, else every slot's full cache) and the prompt cache (--cache-ram, inside
  // --kv-memory when that is given; --cache-ram -1, no bound, is not counted). What building it
  // takes besides (the tokenizer's tables, each slot's prefill scratch) is measured by the router.
  static size_t planned_bytes(const Model& m, const ServerOptions& o);

  HttpService& service() { return *service_; }
  Scheduler& scheduler() { return *scheduler_; }
  const std::string& id() const { return env_->request.model_id; }
  // What slake-server prints once the model is loaded: its shape, its slots, its template; each
  // line starts with `prefix`.
  std::string describe(const std::string& prefix) const;

 private:
  ServerOptions o_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatPrompter> chat_;
  SchedulerConfig sc_;
  std::unique_ptr<Scheduler> scheduler_;
  HttpCounters counters_;
  std::unique_ptr<ServerEnv> env_;
  std::unique_ptr<Embedder> embedder_;
  std::unique_ptr<OpenAiService> service_;
  double load_ms_ = 0;
};

}  // namespace slake::server
