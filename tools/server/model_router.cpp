#include "model_router.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <malloc.h>
#include <nlohmann/json.hpp>

#include "api_error.h"
#include "http_routes.h"
#include "process_memory.h"
#include "slake/cpu/cpu_weights.h"
#include "slake/error.h"

namespace slake::server {

namespace {

using json = nlohmann::ordered_json;

HttpResponse json_reply(const json& body, int status = 200) { return {status, "application/json", body.dump(), {}}; }

const char* state_name(int s) { return s == 0 ? "unloaded" : s == 1 ? "loading" : "loaded"; }

std::string mib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / 1048576.0);
  return b;
}

// The "model" of a JSON body (/models/load, and every POST the router forwards).
std::string body_model(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ApiError(400, "the request body is not a JSON object");
  const std::string id = member_or<std::string>(j, "model", "", "model");
  if (id.empty())
    throw ApiError(400, "model name is missing from the request: the server serves several (GET /models lists them)",
                   "invalid_request_error", "model");
  return id;
}

bool router_path(const std::string& method, const std::string& path) {
  return (method == "GET" && (path == "/health" || path == "/v1/health" || path == "/models" || path == "/v1/models")) ||
         (method == "POST" && (path == "/models/load" || path == "/models/unload"));
}

}  // namespace

ModelRouter::ModelRouter(const std::vector<ModelEntry>& models, const std::vector<std::string>& router_args,
                         const RouterConfig& cfg)
    : cfg_(cfg) {
  for (const ModelEntry& m : models) {
    Served s;
    s.entry = m;
    s.args = {"-m", m.path};
    s.args.insert(s.args.end(), m.preset_args.begin(), m.preset_args.end());
    s.args.insert(s.args.end(), router_args.begin(), router_args.end());
    try {
      s.options = parse_server_args(s.args, nullptr);
    } catch (const Error& e) {
      fail("model '" + m.id + "' (" + m.path + "): " + e.what());
    }
    if (cfg_.memory > 0 && s.options.cache_ram_mib < 0 && s.options.kv_memory_mib <= 0 && !s.options.kv_unified)
      fail("model '" + m.id + "': --cache-ram -1 sets no bound on its prompt cache, so --models-memory cannot plan it; give "
           "--cache-ram MiB or --kv-memory");
    s.options.alias = m.id;
    s.options.model_path = m.path;
    s.args.insert(s.args.begin(), "slake-server");
    // The key is not shown in /models.
    for (size_t i = 0; i + 1 < s.args.size(); ++i)
      if (s.args[i] == "--api-key") s.args[i + 1] = "(hidden)";
    for (std::string& a : s.args)
      if (a.rfind("--api-key=", 0) == 0) a = "--api-key=(hidden)";
    models_.push_back(std::move(s));
  }
}

ModelRouter::~ModelRouter() { stop(); }

void ModelRouter::load_on_startup() {
  for (const Served& s : models_)
    if (s.entry.load_on_startup) try {
        acquire(s.entry.id, true);
      } catch (const ApiError& e) {
        fail("model '" + s.entry.id + "' (load-on-startup): " + e.what());
      }
}

void ModelRouter::stop() {
  std::vector<std::shared_ptr<ModelInstance>> running;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    for (Served& s : models_)
      if (s.instance) running.push_back(s.instance);
    cv_.notify_all();
  }
  for (auto& m : running) m->scheduler().stop();
}

ModelRouter::Served& ModelRouter::find(const std::string& id) {
  for (Served& s : models_)
    if (s.entry.id == id) return s;
  throw ApiError(404, "the model '" + id + "' does not exist (GET /models lists them)", "invalid_request_error", "model",
                 "model_not_found");
}

namespace {

ApiError shutting_down() { return ApiError(503, "the server is shutting down", "server_error"); }

}  // namespace

std::vector<std::shared_ptr<ModelInstance>> ModelRouter::make_room(std::unique_lock<std::mutex>& l, const Served& loading,
                                                                  size_t own, size_t need) {
  if (cfg_.memory > 0 && own > cfg_.memory)
    throw ApiError(400, "the model '" + loading.entry.id + "' plans " + mib(own) + " (its file, KV caches and prompt cache), more than " +
                            "--models-memory " + mib(cfg_.memory) + " even alone; serve it with a smaller -c, --kv-memory or --cache-ram",
                   "invalid_request_error", "model", "model_too_large");
  // A model that has just answered may still be finishing its reply: busy models get a moment.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    if (stopping_) throw shutting_down();
    // What is counted: the loaded models and those loading that made their room, but this one.
    size_t count = 0, planned = 0;
    std::vector<Served*> idle;
    for (Served& s : models_) {
      if (&s == &loading || !(s.state == State::Loaded || (s.state == State::Loading && s.admitted))) continue;
      ++count;
      planned += s.planned;
      // Idle: only the router holds it, and no request can take it without mu_.
      if (s.state == State::Loaded && s.instance.use_count() == 1) idle.push_back(&s);
    }
    std::sort(idle.begin(), idle.end(), [](const Served* a, const Served* b) { return a->last_used < b->last_used; });
    const auto fits = [&](size_t c, size_t p) {
      return (cfg_.models_max == 0 || c + 1 <= static_cast<size_t>(cfg_.models_max)) && (cfg_.memory == 0 || p + need <= cfg_.memory);
    };
    // The fewest least recently used idle models whose going makes room, chosen before any goes.
    size_t k = 0, freed = 0;
    while (k < idle.size() && !fits(count - k, planned - freed)) freed += idle[k++]->planned;
    if (fits(count - k, planned - freed)) {
      std::vector<std::shared_ptr<ModelInstance>> out;
      for (size_t i = 0; i < k; ++i) {
        Served& v = *idle[i];
        std::fprintf(stderr, "slake-server: unloading '%s' (least recently used) to load '%s'\n", v.entry.id.c_str(),
                     loading.entry.id.c_str());
        out.push_back(std::move(v.instance));
        v.state = State::Unloaded;
        v.planned = 0;
        ++unloads_;
      }
      return out;
    }
    if (cv_.wait_until(l, deadline) == std::cv_status::timeout && std::chrono::steady_clock::now() >= deadline)
      throw ApiError(503, "cannot load the model '" + loading.entry.id + "': the " + std::to_string(count) +
                              " models loaded are serving requests or loading, and another would exceed --models-max " +
                              std::to_string(cfg_.models_max) + " or --models-memory; retry later",
                     "server_error", "", "models_busy");
  }
}

std::shared_ptr<ModelInstance> ModelRouter::acquire(const std::string& id, bool autoload) {
  std::unique_lock<std::mutex> l(mu_);
  if (stopping_) throw shutting_down();
  Served& s = find(id);
  if (s.state == State::Loading) {
    // Another request loads it: this one takes that load's outcome.
    const uint64_t attempt = s.attempt;
    cv_.wait(l, [&] { return s.state != State::Loading || stopping_; });
    if (stopping_) throw shutting_down();
    if (s.state == State::Unloaded && s.attempt == attempt && s.failure) throw *s.failure;
  }
  if (s.state == State::Loaded) {
    s.last_used = ++clock_;
    return s.instance;
  }
  if (!autoload)
    throw ApiError(400, "the model '" + id + "' is not loaded (the server runs with --no-models-autoload, or ?autoload=false): "
                            "POST /models/load first", "invalid_request_error", "model", "model_not_loaded");
  s.state = State::Loading;
  s.admitted = false;
  s.failure.reset();
  s.error.clear();
  const uint64_t attempt = ++s.attempt;
  l.unlock();
  const auto failed = [&](const ApiError& e) {
    std::lock_guard<std::mutex> g(mu_);
    s.state = State::Unloaded;
    s.planned = 0;
    s.admitted = false;
    if (s.attempt == attempt) s.failure = e;
    if (e.status != 503) s.error = e.what();  // a load that failed, not one that found no room
    cv_.notify_all();
  };
  std::vector<std::shared_ptr<ModelInstance>> unloaded;
  std::shared_ptr<ModelInstance> inst;
  // One load at a time, so that what building a model takes can be measured.
  std::lock_guard<std::mutex> one_load(load_mu_);
  try {
    // The weights are mapped first (cheap): they and the model's shape give what it plans, and
    // room is made for that and what building it took last time (as far as the limit allows: a
    // measurement is redone) before its slots, caches and threads are built. What building it
    // takes is measured (anonymous memory: the vocabulary read with the weights, then the
    // tokenizer, the slots' scratch), and room is made for that too.
    malloc_trim(0);
    const size_t anon_before_load = bench::anon_rss_bytes();
    std::unique_ptr<Model> model = load_model(s.options.model_path);
    const size_t anon_loaded = bench::anon_rss_bytes();
    const size_t need = ModelInstance::planned_bytes(*model, s.options);
    l.lock();
    const size_t first = cfg_.memory > 0 ? std::min(need + s.overhead, std::max(need, cfg_.memory)) : need + s.overhead;
    unloaded = make_room(l, s, need, first);
    s.planned = first;
    s.admitted = true;
    l.unlock();
    unloaded.clear();  // their slots stop and their memory goes, outside the lock
    // Where the CPU path's repacked copies of the weights hand the file's pages back (a mapped
    // file: cpu_weights.h), they stand in for the file that `need` counts: made before the
    // measurement, so as not to be counted twice.
    if (model->release_pages) cpu_weights(*model);
    malloc_trim(0);
    const size_t anon0 = bench::anon_rss_bytes();
    inst = std::make_shared<ModelInstance>(s.options, std::move(model));
    const size_t anon1 = bench::anon_rss_bytes();
    l.lock();
    // The vocabulary, then the rest: apart, so that the models unloaded between them do not count.
    s.overhead = (anon_loaded > anon_before_load ? anon_loaded - anon_before_load : 0) + (anon1 > anon0 ? anon1 - anon0 : 0);
    unloaded = make_room(l, s, need, need + s.overhead);
    s.planned = need + s.overhead;
  } catch (const ApiError& e) {
    if (l.owns_lock()) l.unlock();
    inst.reset();
    failed(e);
    throw;
  } catch (const std::exception& e) {
    if (l.owns_lock()) l.unlock();
    inst.reset();
    const ApiError err(500, "the model '" + id + "' failed to load: " + e.what(), "server_error", "model", "model_load_failed");
    failed(err);
    throw err;
  }
  s.instance = inst;
  s.state = State::Loaded;
  s.last_used = ++clock_;
  ++loads_;
  cv_.notify_all();
  const std::string planned = mib(s.planned), overhead = mib(s.overhead);
  l.unlock();
  unloaded.clear();
  malloc_trim(0);
  std::fprintf(stderr, "slake-server: loaded '%s' (plans %s, of which building it took %s)\n%s\n", id.c_str(),
               planned.c_str(), overhead.c_str(), inst->describe("slake-server:   ").c_str());
  return inst;
}

void ModelRouter::unload(const std::string& id) {
  std::shared_ptr<ModelInstance> inst;
  {
    std::unique_lock<std::mutex> l(mu_);
    Served& s = find(id);
    cv_.wait(l, [&] { return s.state != State::Loading; });
    if (s.state != State::Loaded) throw ApiError(400, "the model '" + id + "' is not loaded", "invalid_request_error", "model");
    inst = std::move(s.instance);
    s.state = State::Unloaded;
    s.planned = 0;
    ++unloads_;
    cv_.notify_all();
  }
  // Requests still running on it end with an error; it goes when the last of them has answered.
  inst->scheduler().stop();
  inst.reset();
  malloc_trim(0);
  std::fprintf(stderr, "slake-server: unloaded '%s'\n", id.c_str());
}

std::string ModelRouter::list() const {
  std::lock_guard<std::mutex> l(mu_);
  json data = json::array();
  for (const Served& s : models_) {
    json status = {{"value", state_name(static_cast<int>(s.state))}, {"args", s.args}};
    if (s.state == State::Unloaded && !s.error.empty()) status["failed"] = true, status["error"] = s.error;
    data.push_back({{"id", s.entry.id},
                    {"object", "model"},
                    {"created", static_cast<long long>(std::time(nullptr))},
                    {"owned_by", "slake"},
                    {"path", s.entry.path},
                    {"status", status},
                    {"planned_bytes", s.planned}});
  }
  return json{{"object", "list"}, {"data", data}}.dump();
}

std::string ModelRouter::metrics() const {
  RouterStats r;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const Served& s : models_) r.loaded += s.state == State::Loaded, r.planned_bytes += s.planned;
    r.memory_limit_bytes = cfg_.memory;
    r.models_max = cfg_.models_max;
    r.loads = loads_;
    r.unloads = unloads_;
  }
  return router_prometheus_text(r);
}

std::optional<HttpResponse> ModelRouter::check_head(const HttpRequest& head) {
  if (auto refused = check_access(head, cfg_.api_key, cfg_.cors_origins, head.path == "/health" || head.path == "/v1/health", counters_))
    return refused;
  // An endpoint no model serves is refused before a model is loaded for it.
  if (router_path(head.method, head.path) || model_endpoint(head.method, head.path)) return std::nullopt;
  const bool known = router_path("GET", head.path) || router_path("POST", head.path) || model_endpoint("GET", head.path) ||
                     model_endpoint("POST", head.path);
  if (!known)
    return HttpResponse{404, "application/json",
                        ApiError(404, "no endpoint " + head.method + " " + head.path, "invalid_request_error", "", "not_found").body().dump(),
                        {}};
  return HttpResponse{405, "application/json",
                      ApiError(405, head.path + " does not take " + head.method, "invalid_request_error", "", "method_not_allowed").body().dump(),
                      {}};
}

bool ModelRouter::quick(const HttpRequest& head) const {
  return head.method == "GET" && (head.path == "/health" || head.path == "/v1/health" || head.path == "/models" ||
                                  head.path == "/v1/models" || (head.path == "/metrics" && query_value(head.target, "model").empty()));
}

void ModelRouter::serve(const HttpRequest& req, HttpReply& reply) {
  try {
    if (router_path(req.method, req.path)) {
      if (req.path == "/health" || req.path == "/v1/health") return reply.send(json_reply({{"status", "ok"}}));
      if (req.method == "GET") return reply.send({200, "application/json", list(), {}});
      const std::string id = body_model(req.body);
      if (req.path == "/models/load")
        acquire(id, true);
      else
        unload(id);
      return reply.send(json_reply({{"success", true}}));
    }
    // A GET names its model in the query; a POST in its body ("model"), or in the query as a GET.
    std::string id = query_value(req.target, "model");
    if (id.empty() && req.method == "POST") id = body_model(req.body);
    if (id.empty() && req.path == "/metrics") return reply.send({200, "text/plain; version=0.0.4", metrics(), {}});
    if (id.empty())
      throw ApiError(400, "model name is missing from the request: give ?model=ID (GET /models lists them)",
                     "invalid_request_error", "model");
    const std::string autoload = query_value(req.target, "autoload");
    if (!autoload.empty() && autoload != "true" && autoload != "false")
      throw ApiError(400, "autoload must be true or false, got '" + autoload + "'", "invalid_request_error", "autoload");
    std::shared_ptr<ModelInstance> inst = acquire(id, autoload.empty() ? cfg_.autoload : autoload == "true");
    // Once answered, the model is idle again for a load waiting on room (make_room).
    struct Done {
      ModelRouter& r;
      std::shared_ptr<ModelInstance>& inst;
      ~Done() {
        inst.reset();
        std::lock_guard<std::mutex> l(r.mu_);
        r.cv_.notify_all();
      }
    } done{*this, inst};
    if (auto refused = inst->service().check_head(req)) return reply.send(*refused);
    inst->service().serve(req, reply);
  } catch (const ApiError& e) {
    if (!reply.started()) reply.send({e.status, "application/json", e.body().dump(), {}});
  }
}

HttpResponse ModelRouter::error(const HttpError& e) const {
  return {e.status, "application/json",
          ApiError(e.status, e.message, e.status >= 500 ? "server_error" : "invalid_request_error").body().dump(), {}};
}

HttpHeaders ModelRouter::reply_headers(const HttpRequest& head) const { return cors_headers(head, cfg_.cors_origins); }

}  // namespace slake::server
