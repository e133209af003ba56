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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(e.body()), "application/json");
}

// Runs a handler, answering ApiError and any other exception as OpenAI's error object.
template <typename F>
void guarded(httplib::Response& res, HttpCounters& c, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    if (e.status == 400) ++c.invalid;
    if (e.status == 503) ++c.rejected_busy;
    send_error(res, e);
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "server_error"));
  }
}

// The state of one streamed reply, shared by the content provider's calls.
struct Stream {
  Stream(ApiRequest r, const Tokenizer& tok, std::string id, long long created, std::shared_ptr<Task> t)
      : req(std::move(r)), rb(req, tok, std::move(id), created), task(std::move(t)) {}
  ApiRequest req;
  ResponseBuilder rb;
  std::shared_ptr<Task> task;
  bool started = false;
};

void completion(const httplib::Request& http, httplib::Response& res, ServerEnv& env, bool chat) {
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
  if (!req.stream) {
    // Not streamed: the whole reply, once done. (A client that leaves early is not noticed.)
    std::vector<Piece> pieces;
    while (!task->take(pieces, std::chrono::seconds(1))) {
    }
    if (!task->error().empty()) throw ApiError(500, task->error(), "server_error");
    res.set_content(dump(ResponseBuilder(req, env.request.tokenizer, id, created).full(pieces, *task)), "application/json");
    return;
  }
  auto st = std::make_shared<Stream>(std::move(req), env.request.tokenizer, id, created, task);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!st->started && st->req.chat) out += sse(st->rb.first_chunk());
        st->started = true;
        std::vector<Piece> pieces;
        const bool done = st->task->take(pieces, std::chrono::milliseconds(100));
        for (const Piece& p : pieces) out += sse(st->rb.piece_chunk(p));
        if (done) {
          if (!st->task->error().empty()) {
            out += sse(ApiError(500, st->task->error(), "server_error").body());
          } else {
            out += sse(st->rb.final_chunk(st->task->finish_reason()));
            if (st->req.include_usage) out += sse(st->rb.usage_chunk(*st->task));
          }
          out += "data: [DONE]\n\n";
        }
        // A client that went away: the write fails (or the socket is not writable), and the task
        // is cancelled; the scheduler frees its slot before its next step.
        if (out.empty() ? !sink.is_writable() : !sink.write(out.data(), out.size())) {
          st->task->cancel();
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [st](bool success) {
        if (!success) st->task->cancel();
      });
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

void add_routes(httplib::Server& svr, ServerEnv& env) {
  svr.set_payload_max_length(64u << 20);
  // Memory a large request used goes back to the system: buffers of 8 MiB and more are mapped on
  // their own (glibc would otherwise raise that threshold to the largest block freed so far and
  // keep such buffers in its heaps; below 8 MiB, a decode step's logits of 8 slots of a 150K
  // vocabulary stay in the heap rather than being mapped and faulted in at every step), and after
  // a request whose body passed 1 MiB the heaps' free pages are returned (its parsed JSON is many
  // small blocks spread over an HTTP thread's arena).
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
  svr.set_logger([](const httplib::Request& req, const httplib::Response&) {
    if (req.body.size() >= (1u << 20)) malloc_trim(0);
  });
  svr.set_pre_routing_handler([&env](const httplib::Request& req, httplib::Response& res) {
    if (env.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + env.api_key) return httplib::Server::HandlerResponse::Unhandled;
    ++env.counters.unauthorized;
    send_error(res, ApiError(401, "invalid API key: send 'Authorization: Bearer KEY' with the server's --api-key",
                             "authentication_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, ApiError(404, "no endpoint " + req.method + " " + req.path, "invalid_request_error", "", "not_found"));
    else if (res.status == 413)
      send_error(res, ApiError(413, "the request body is too large (a form body over 8 KiB, or any body over 64 MiB)",
                               "invalid_request_error"));
    else
      send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error"));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal error: " + what, "server_error"));
  });

  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    svr.Post(path, [&env](const httplib::Request& req, httplib::Response& res) {
      guarded(res, env.counters, [&] { completion(req, res, env, true); });
    });
  for (const char* path : {"/v1/completions", "/completions"})
    svr.Post(path, [&env](const httplib::Request& req, httplib::Response& res) {
      guarded(res, env.counters, [&] { completion(req, res, env, false); });
    });
  for (const char* path : {"/v1/models", "/models"})
    svr.Get(path, [&env](const httplib::Request&, httplib::Response& res) {
      const json m = {{"id", env.request.model_id},
                      {"object", "model"},
                      {"created", env.created},
                      {"owned_by", "slake"},
                      {"meta", {{"n_ctx", env.request.n_ctx}, {"n_vocab", env.request.cfg.n_vocab},
                                {"n_slots", env.scheduler.config().n_slots}}}};
      res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr.Get("/metrics", [&env](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(env.scheduler.stats(), env.scheduler.config(), env.counters),
                    "text/plain; version=0.0.4");
  });
  svr.Post("/tokenize", [&env](const httplib::Request& req, httplib::Response& res) {
    guarded(res, env.counters, [&] {
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
      res.set_content(dump({{"tokens", tok.tokenize(text, add_special && tok.vocab().add_bos, parse_special)}}),
                      "application/json");
    });
  });
  svr.Post("/detokenize", [&env](const httplib::Request& req, httplib::Response& res) {
    guarded(res, env.counters, [&] {
      const json tokens = read_tokens(parse_object(req.body), env.request.cfg.n_vocab);
      res.set_content(dump({{"content", env.request.tokenizer.detokenize(tokens.get<std::vector<int32_t>>())}}),
                      "application/json");
    });
  });
}

}  // namespace slake::server
