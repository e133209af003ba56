#include "http_routes.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>

#include "api_error.h"
#include "openai_response.h"

namespace slake::server {

namespace {

using nlohmann::json;

HttpResponse json_response(const json& body, int status = 200) { return {status, "application/json", dump(body), {}}; }

// Runs a handler, answering ApiError and any other exception as OpenAI's error object (unless the
// reply had started: a streamed reply ends with its own error event).
template <typename F>
void guarded(HttpReply& reply, HttpCounters& c, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    if (e.status == 400) ++c.invalid;
    if (e.status == 503) ++c.rejected_busy;
    if (!reply.started()) reply.send(json_response(e.body(), e.status));
  } catch (const std::exception& e) {
    if (!reply.started())
      reply.send(json_response(ApiError(500, std::string("internal error: ") + e.what(), "server_error").body(), 500));
  }
}

void completion(const HttpRequest& http, HttpReply& reply, ServerEnv& env, bool chat) {
  static std::atomic<uint64_t> next_id{0};
  ++env.counters.requests;
  ApiRequest req = parse_request(http.body, chat, env.request);
  auto task = std::make_shared<Task>(req.gen);
  std::string why;
  switch (env.scheduler.submit(task, &why)) {
    case Scheduler::Admit::Queued:
      break;
    case Scheduler::Admit::QueueFull:
      throw ApiError(503, why, "server_error", "", "server_busy");
    case Scheduler::Admit::TooLarge:
      throw ApiError(400, why, "invalid_request_error", "max_tokens", "kv_memory_exceeded");
  }
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
  const long long created = static_cast<long long>(std::time(nullptr));
  // A client that went away (the socket closed, or a write failed or stalled past --timeout): the
  // task is cancelled, and the scheduler frees its slot before its next step.
  if (!req.stream) {
    std::vector<Piece> pieces;
    while (!task->take(pieces, std::chrono::milliseconds(500))) {
      if (!reply.connected()) return task->cancel();
    }
    if (!task->error().empty()) throw ApiError(500, task->error(), "server_error");
    reply.send(json_response(ResponseBuilder(req, env.request.tokenizer, id, created).full(pieces, *task)));
    return;
  }
  ResponseBuilder rb(req, env.request.tokenizer, id, created);
  if (!reply.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return task->cancel();
  std::string out = req.chat ? sse(rb.first_chunk()) : "";
  const bool hold = req.tools.active();  // a tool call is known only whole
  std::string held;
  for (;;) {
    std::vector<Piece> pieces;
    const bool done = task->take(pieces, std::chrono::milliseconds(100));
    for (const Piece& p : pieces) {
      if (hold) held += p.text;
      else out += sse(rb.piece_chunk(p));
    }
    if (done) {
      if (!task->error().empty()) {
        out += sse(ApiError(500, task->error(), "server_error").body());
      } else {
        std::string finish = task->finish_reason();
        if (hold)
          for (const nlohmann::json& c : rb.tool_reply_chunks(held, &finish)) out += sse(c);
        out += sse(rb.final_chunk(finish));
        if (req.include_usage) out += sse(rb.usage_chunk(*task));
      }
      out += "data: [DONE]\n\n";
    }
    if (!reply.write(out)) return task->cancel();
    out.clear();
    if (done) {
      reply.finish();
      return;
    }
  }
}

json read_tokens(const json& body, int n_vocab) {
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw bad_field("tokens", "'tokens' must be an array of token ids");
  for (const json& t : *it)
    if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= n_vocab)
      throw bad_field("tokens", "'tokens' must hold integers in [0, " + std::to_string(n_vocab) + ")");
  return *it;
}

}  // namespace

OpenAiService::OpenAiService(ServerEnv& env) : env_(env) {
  // Memory a large request used goes back to the system: buffers of 8 MiB and more are mapped on
  // their own (glibc would otherwise raise that threshold to the largest block freed so far and
  // keep such buffers in its heaps; below 8 MiB, a decode step's logits of 8 slots of a 150K
  // vocabulary stay in the heap rather than being mapped and faulted in at every step). The HTTP
  // layer returns the heaps' free pages after a body over 1 MiB.
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
  const auto add = [this](const char* method, const char* path, bool quick, auto&& f) {
    routes_.push_back({method, path, quick, std::forward<decltype(f)>(f)});
  };
  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    add("POST", path, false, [&env](const HttpRequest& req, HttpReply& reply) {
      guarded(reply, env.counters, [&] { completion(req, reply, env, true); });
    });
  for (const char* path : {"/v1/completions", "/completions"})
    add("POST", path, false, [&env](const HttpRequest& req, HttpReply& reply) {
      guarded(reply, env.counters, [&] { completion(req, reply, env, false); });
    });
  for (const char* path : {"/v1/models", "/models"})
    add("GET", path, true, [&env](const HttpRequest&, HttpReply& reply) {
      const json m = {{"id", env.request.model_id},
                      {"object", "model"},
                      {"created", env.created},
                      {"owned_by", "slake"},
                      {"meta", {{"n_ctx", env.request.n_ctx}, {"n_vocab", env.request.cfg.n_vocab},
                                {"n_slots", env.scheduler.config().n_slots}}}};
      reply.send(json_response({{"object", "list"}, {"data", json::array({m})}}));
    });
  add("GET", "/health", true, [](const HttpRequest&, HttpReply& reply) {
    reply.send({200, "application/json", "{\"status\":\"ok\"}", {}});
  });
  add("GET", "/metrics", true, [&env](const HttpRequest&, HttpReply& reply) {
    reply.send({200, "text/plain; version=0.0.4",
                prometheus_text(env.scheduler.stats(), env.scheduler.config(), env.counters), {}});
  });
  add("POST", "/tokenize", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(reply, env.counters, [&] {
      const json body = parse_object(req.body);
      const auto it = body.find("content");
      if (it == body.end() || !it->is_string()) throw bad_field("content", "'content' must be a string");
      const auto flag = [&](const char* name, bool dflt) {
        const auto f = body.find(name);
        if (f == body.end() || f->is_null()) return dflt;
        if (!f->is_boolean()) throw bad_field(name, std::string("'") + name + "' must be a boolean");
        return f->get<bool>();
      };
      const bool add_special = flag("add_special", false);
      const bool parse_special = flag("parse_special", true);
      const std::string text = it->get<std::string>();
      if (find_invalid_utf8(text) != std::string::npos) throw bad_field("content", "'content' is not valid UTF-8");
      const auto& tok = env.request.tokenizer;
      reply.send(json_response({{"tokens", tok.tokenize(text, add_special && tok.vocab().add_bos, parse_special)}}));
    });
  });
  add("POST", "/detokenize", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(reply, env.counters, [&] {
      const json tokens = read_tokens(parse_object(req.body), env.request.cfg.n_vocab);
      reply.send(json_response({{"content", env.request.tokenizer.detokenize(tokens.get<std::vector<int32_t>>())}}));
    });
  });
}

const OpenAiService::Route* OpenAiService::find(const HttpRequest& head) const {
  for (const Route& r : routes_)
    if (r.path == head.path && r.method == head.method) return &r;
  return nullptr;
}

std::optional<HttpResponse> OpenAiService::check_head(const HttpRequest& head) {
  if (!env_.api_key.empty() && head.path != "/health") {
    const std::string* auth = head.header("Authorization");
    const std::string want = "Bearer " + env_.api_key;
    // Compared in time that does not depend on where the key first differs.
    unsigned diff = auth == nullptr || auth->size() != want.size();
    for (size_t i = 0; auth != nullptr && i < std::min(auth->size(), want.size()); ++i)
      diff |= static_cast<unsigned char>((*auth)[i] ^ want[i]);
    if (diff) {
      ++env_.counters.unauthorized;
      return json_response(ApiError(401, "invalid API key: send 'Authorization: Bearer KEY' with the server's --api-key",
                                    "authentication_error", "", "invalid_api_key").body(), 401);
    }
  }
  if (find(head)) return std::nullopt;
  std::string allow;
  for (const Route& r : routes_)
    if (r.path == head.path) allow += (allow.empty() ? "" : ", ") + r.method;
  if (allow.empty())
    return json_response(ApiError(404, "no endpoint " + head.method + " " + head.path, "invalid_request_error", "",
                                  "not_found").body(), 404);
  HttpResponse r = json_response(ApiError(405, head.path + " takes " + allow + ", not " + head.method,
                                          "invalid_request_error", "", "method_not_allowed").body(), 405);
  r.headers.emplace_back("Allow", allow);
  return r;
}

bool OpenAiService::quick(const HttpRequest& head) const {
  const Route* r = find(head);
  return r != nullptr && r->quick;
}

void OpenAiService::serve(const HttpRequest& req, HttpReply& reply) {
  const Route* r = find(req);
  if (r == nullptr) throw std::logic_error("no route for " + req.method + " " + req.path);
  r->serve(req, reply);
}

HttpResponse OpenAiService::error(const HttpError& e) const {
  if (e.status == 400) ++env_.counters.invalid;
  return json_response(ApiError(e.status, e.message, e.status >= 500 ? "server_error" : "invalid_request_error").body(),
                       e.status);
}

}  // namespace slake::server
