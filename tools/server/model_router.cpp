#include "model_router.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <malloc.h>
#include <nlohmann/json.hpp>

#include "api_error.h"
#include "http_routes.h"
#include "process_memory.h"
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

bool router_path(const HttpRequest& h) {
  return (h.method == "GET" && (h.path == "/health" || h.path == "/v1/health" || h.path == "/models" || h.path == "/v1/models")) ||
         (h.method == "POST" && (h.path == "/models/load" || h.path == "/models/unload"));
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
    s.options.alias = m.id;
    s.options.model_path = m.path;
    s.args.insert(s.args.begin(), "slake-server");
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
    for (Served& s : models_)
      if (s.instance) running.push_back(s.instance);
  }
  for (auto& m : running) m->scheduler().stop();
}

ModelRouter::Served& ModelRouter::find(const std::string& id) {
  for (Served& s : models_)
    if (s.entry.id == id) return s;
  throw ApiError(404, "the model '" + id + "' does not exist (GET /models lists them)", "invalid_request_error", "model",
                 "model_not_found");
}

std::vector<std::shared_ptr<ModelInstance>> ModelRouter::make_room(const Served& loading, size_t need) {
  if (cfg_.memory > 0 && need > cfg_.memory)
    throw ApiError(400, "the model '" + loading.entry.id + "' plans " + mib(need) + " (weights, KV caches, prompt cache), more than " +
                            "--models-memory " + mib(cfg_.memory) + " even alone; serve it with a smaller -c, --kv-memory or --cache-ram",
                   "invalid_request_error", "model", "model_too_large");
  std::vector<std::shared_ptr<ModelInstance>> out;
  for (;;) {
    size_t count = 0, planned = 0;
    for (const Served& s : models_)
      if (&s != &loading && s.state != State::Unloaded) ++count, planned += s.planned;
    const bool fits = (cfg_.models_max == 0 || count + 1 <= static_cast<size_t>(cfg_.models_max)) &&
                      (cfg_.memory == 0 || planned + need <= cfg_.memory);
    if (fits) return out;
    // The least recently used loaded model that serves no request: only the router holds it, and
    // no request can take it without mu_.
    Served* victim = nullptr;
    for (Served& s : models_)
      if (s.state == State::Loaded && s.instance.use_count() == 1 && (!victim || s.last_used < victim->last_used)) victim = &s;
    if (!victim)
      throw ApiError(503, "cannot load the model '" + loading.entry.id + "': the " + std::to_string(count) +
                              " models loaded are serving requests or loading, and another would exceed --models-max " +
                              std::to_string(cfg_.models_max) + " or --models-memory; retry later",
                     "server_error", "", "models_busy");
    std::fprintf(stderr, "slake-server: unloading '%s' (least recently used) to load '%s'\n", victim->entry.id.c_str(),
                 loading.entry.id.c_str());
    out.push_back(std::move(victim->instance));
    victim->state = State::Unloaded;
    victim->planned = 0;
    ++unloads_;
  }
}

std::shared_ptr<ModelInstance> ModelRouter::acquire(const std::string& id, bool autoload) {
  std::unique_lock<std::mutex> l(mu_);
  Served& s = find(id);
  cv_.wait(l, [&] { return s.state != State::Loading; });
  if (s.state == State::Loaded) {
    s.last_used = ++clock_;
    return s.instance;
  }
  if (!autoload)
    throw ApiError(400, "the model '" + id + "' is not loaded (the server runs with --no-models-autoload, or ?autoload=false): "
                            "POST /models/load first", "invalid_request_error", "model", "model_not_loaded");
  s.state = State::Loading;
  s.error.clear();
  l.unlock();
  std::vector<std::shared_ptr<ModelInstance>> unloaded;
  const auto failed = [&](const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    s.state = State::Unloaded;
    s.planned = 0;
    s.error = why;
    cv_.notify_all();
  };
  // One load at a time, so that what building a model takes can be measured.
  std::lock_guard<std::mutex> one_load(load_mu_);
  std::shared_ptr<ModelInstance> inst;
  size_t need = 0;
  try {
    // The weights are mapped first (cheap): they and the model's shape give what it plans, and
    // room is made for that (and for what building it took last time) before its slots, caches
    // and threads are built. What building it takes is measured, and room is made for it too.
    malloc_trim(0);
    const size_t anon_before_load = bench::anon_rss_bytes();
    std::unique_ptr<Model> model = load_model(s.options.model_path);
    const size_t anon_loaded = bench::anon_rss_bytes();
    need = ModelInstance::planned_bytes(*model, s.options);
    l.lock();
    unloaded = make_room(s, need + s.overhead);
    s.planned = need + s.overhead;
    l.unlock();
    unloaded.clear();  // their slots stop and their memory goes, outside the lock
    malloc_trim(0);
    const size_t anon0 = bench::anon_rss_bytes();
    inst = std::make_shared<ModelInstance>(s.options, std::move(model));
    const size_t anon1 = bench::anon_rss_bytes();
    l.lock();
    // The vocabulary read with the weights, then the tokenizer, slots and scratch; apart, so that
    // the models unloaded between them do not count against it.
    const size_t took = (anon_loaded > anon_before_load ? anon_loaded - anon_before_load : 0) + (anon1 > anon0 ? anon1 - anon0 : 0);
    s.overhead = std::max(s.overhead, took);
    unloaded = make_room(s, need + s.overhead);
    s.planned = need + s.overhead;
  } catch (const ApiError& e) {
    if (l.owns_lock()) l.unlock();
    inst.reset();
    failed(e.status == 503 ? "" : e.what());
    throw;
  } catch (const std::exception& e) {
    if (l.owns_lock()) l.unlock();
    inst.reset();
    failed(e.what());
    throw ApiError(500, "the model '" + id + "' failed to load: " + e.what(), "server_error", "model", "model_load_failed");
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
  return check_access(head, cfg_.api_key, cfg_.cors_origins, head.path == "/health" || head.path == "/v1/health", counters_);
}

bool ModelRouter::quick(const HttpRequest& head) const {
  return head.method == "GET" && (head.path == "/health" || head.path == "/v1/health" || head.path == "/models" ||
                                  head.path == "/v1/models" || (head.path == "/metrics" && query_value(head.target, "model").empty()));
}

void ModelRouter::serve(const HttpRequest& req, HttpReply& reply) {
  try {
    if (router_path(req)) {
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
    const std::shared_ptr<ModelInstance> inst = acquire(id, autoload.empty() ? cfg_.autoload : autoload == "true");
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
