// slake-server's router mode, as llama-server's: started without -m, it serves the models of
// --models-dir and --models-preset (model_catalog.h) from one process. A request names its model
// (?model=ID, or a POST body's "model") and is served by that model's own slots and endpoints
// (model_instance.h), the model loaded on its first request (unless --no-models-autoload or
// ?autoload=false). Loading a model unloads the least recently used idle ones while more than
// --models-max would be loaded, or while the loaded models' planned memory (weights, KV caches,
// prompt caches: ModelInstance::planned_bytes) would exceed --models-memory; when only models
// serving requests could make room, the request gets a 503.
//   GET  /models, /v1/models       every model: id, path, status (unloaded, loading, loaded; a failed
//                                  load's error), the arguments it is served with, planned bytes
//   POST /models/load, /unload     {"model": ID}
//   GET  /metrics                  without ?model=: the router's gauges; with it, the model's
//   GET  /health                   {"status": "ok"}
// Every other endpoint is the model's own (http_routes.h).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api_error.h"
#include "http_server.h"
#include "metrics.h"
#include "model_catalog.h"
#include "model_instance.h"
#include "server_options.h"

namespace slake::server {

struct RouterConfig {
  int models_max = 4;  // loaded at once; 0: no limit
  size_t memory = 0;   // bytes the loaded models may plan together; 0: no limit
  bool autoload = true;
  std::string api_key;
  std::vector<std::string> cors_origins;
};

class ModelRouter final : public HttpService {
 public:
  // Each model is served with `-m PATH`, its preset's flags, then `router_args` (slake-server's
  // command line, which wins), its id as its alias. Throws slake::Error for a model whose
  // arguments do not parse.
  ModelRouter(const std::vector<ModelEntry>& models, const std::vector<std::string>& router_args, const RouterConfig& cfg);
  ~ModelRouter() override;
  // Loads the models whose preset says load-on-startup; throws slake::Error when one fails.
  void load_on_startup();
  // Stops every loaded model's slots: requests still running end with an error.
  void stop();

  std::optional<HttpResponse> check_head(const HttpRequest& head) override;
  bool quick(const HttpRequest& head) const override;
  void serve(const HttpRequest& req, HttpReply& reply) override;
  HttpResponse error(const HttpError& e) const override;
  HttpHeaders reply_headers(const HttpRequest& head) const override;

 private:
  enum class State { Unloaded, Loading, Loaded };
  struct Served {
    ModelEntry entry;
    ServerOptions options;
    std::vector<std::string> args;  // as /models shows them
    State state = State::Unloaded;
    std::shared_ptr<ModelInstance> instance;  // while Loaded
    size_t planned = 0;                       // while Loading or Loaded
    size_t overhead = 0;                      // what building it took last, measured (anonymous memory)
    bool admitted = false;                    // while Loading: its room is made and counted
    uint64_t last_used = 0;
    uint64_t attempt = 0;                     // loads begun
    std::optional<ApiError> failure;          // how the last load ended when it failed, for its waiters
    std::string error;                        // the last load's failure, for /models
  };
  Served& find(const std::string& id);  // throws ApiError 404
  // The model `id`, loaded if it is not (and `autoload`): throws ApiError.
  std::shared_ptr<ModelInstance> acquire(const std::string& id, bool autoload);
  // Under mu_ (held by `l`): unloads idle models, least recently used first, until `need` more
  // bytes and one more model fit; returns them, to be destroyed outside the lock. Only when the
  // idle models can make room do any go; busy ones get a second to finish. Throws ApiError: 400
  // when `own` (the model's file and caches) alone exceeds --models-memory, 503 when no room comes.
  std::vector<std::shared_ptr<ModelInstance>> make_room(std::unique_lock<std::mutex>& l, const Served& loading, size_t own,
                                                        size_t need);
  void unload(const std::string& id);
  std::string list() const;
  std::string metrics() const;

  RouterConfig cfg_;
  std::vector<Served> models_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::mutex load_mu_;                   // held through a load
  uint64_t clock_ = 0;                   // under mu_
  uint64_t loads_ = 0, unloads_ = 0;     // under mu_
  bool stopping_ = false;                // under mu_: stop() was called; nothing more loads
  HttpCounters counters_;                // the router's own 401s
};

}  // namespace slake::server
