#include "http_routes.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <tuple>

#include "anthropic.h"
#include "api_error.h"
#include "llama_native.h"
#include "responses_api.h"
#include "webui_html.h"
#include "openai_response.h"

namespace slake::server {

namespace {

using nlohmann::json;

HttpResponse json_response(const json& body, int status = 200) { return {status, "application/json", dump(body), {}}; }

// Runs a handler, answering ApiError and any other exception as an error object (OpenAI's, or
// Anthropic's for its API) unless the reply had started: a streamed reply ends with its own error event.
enum class Shape { OpenAi, Anthropic };
template <typename F>
void guarded(HttpReply& reply, HttpCounters& c, F&& f, Shape shape = Shape::OpenAi) {
  const auto send = [&](const ApiError& e) {
    if (!reply.started()) reply.send(json_response(shape == Shape::Anthropic ? anthropic_error(e) : e.body(), e.status));
  };
  try {
    f();
  } catch (const ApiError& e) {
    if (e.status == 400) ++c.invalid;
    if (e.status == 503) ++c.rejected_busy;
    send(e);
  } catch (const std::exception& e) {
    send(ApiError(500, std::string("internal error: ") + e.what(), "server_error"));
  }
}

std::atomic<uint64_t> next_id{0};

// Queues a request's task; throws the 503 or 400 of a full queue or a request too large.
std::shared_ptr<Task> submit(const ApiRequest& req, ServerEnv& env) {
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
  return task;
}

// Waits for the whole reply; false (the task cancelled) when the client left meanwhile.
bool wait_all(Task& task, HttpReply& reply, std::vector<Piece>& pieces) {
  while (!task.take(pieces, std::chrono::milliseconds(500)))
    if (!reply.connected()) {
      task.cancel();
      return false;
    }
  if (!task.error().empty()) throw ApiError(500, task.error(), "server_error");
  return true;
}

void completion(const HttpRequest& http, HttpReply& reply, ServerEnv& env, bool chat) {
  ++env.counters.requests;
  ApiRequest req = parse_request(http.body, chat, env.request);
  auto task = submit(req, env);
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
  const long long created = static_cast<long long>(std::time(nullptr));
  // A client that went away (the socket closed, or a write failed or stalled past --timeout): the
  // task is cancelled, and the scheduler frees its slot before its next step.
  if (!req.stream) {
    std::vector<Piece> pieces;
    if (wait_all(*task, reply, pieces))
      reply.send(json_response(ResponseBuilder(req, env.request.tokenizer, id, created).full(pieces, *task)));
    return;
  }
  ResponseBuilder rb(req, env.request.tokenizer, id, created);
  if (!reply.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return task->cancel();
  std::string out = req.chat ? sse(rb.first_chunk()) : "";
  const bool hold = req.tools.active();  // a tool call is known only whole
  std::string held;
  std::optional<ReasoningSplitter> split;  // a thinking model's reasoning, streamed as reasoning_content
  if (req.reasoning) split.emplace(req.think_open);
  const auto emit = [&](Piece p, const std::string& reasoning) {
    if (!reasoning.empty()) out += sse(rb.reasoning_chunk(reasoning));
    if (hold) held += p.text;
    else if (!p.text.empty() || !p.tokens.empty() || (req.return_tokens && !p.ids.empty())) out += sse(rb.piece_chunk(p));
  };
  for (;;) {
    std::vector<Piece> pieces;
    const bool done = task->take(pieces, std::chrono::milliseconds(100));
    for (Piece& p : pieces) {
      std::string reasoning;
      if (split) std::tie(reasoning, p.text) = split->push(p.text);
      emit(std::move(p), reasoning);
    }
    if (done && split) {
      Piece rest;
      std::string reasoning;
      std::tie(reasoning, rest.text) = split->flush();
      emit(std::move(rest), reasoning);
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

// llama-server's native /completion (llama_native.h) on the text completion path.
void native_completion(const HttpRequest& http, HttpReply& reply, ServerEnv& env) {
  ++env.counters.requests;
  const ApiRequest req = parse_request(native_to_openai(http.body), false, env.request);
  auto task = submit(req, env);
  const std::string prompt_text = env.request.tokenizer.detokenize(req.gen.prompt, true);
  if (!req.stream) {
    std::vector<Piece> pieces;
    if (!wait_all(*task, reply, pieces)) return;
    std::string content;
    std::vector<int32_t> ids;
    for (const Piece& p : pieces) content += p.text, ids.insert(ids.end(), p.ids.begin(), p.ids.end());
    reply.send(json_response(native_final(req, content, ids, *task, prompt_text)));
    return;
  }
  if (!reply.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return task->cancel();
  int n_gen = 0;
  for (;;) {
    std::vector<Piece> pieces;
    const bool done = task->take(pieces, std::chrono::milliseconds(100));
    std::string out;
    for (const Piece& p : pieces) {
      n_gen += static_cast<int>(p.ids.size());
      out += sse(native_partial(p, n_gen, static_cast<int>(req.gen.prompt.size())));
    }
    if (done)
      out += sse(task->error().empty() ? native_final(req, "", {}, *task, prompt_text)
                                       : ApiError(500, task->error(), "server_error").body());
    if (!reply.write(out)) return task->cancel();
    if (done) {
      reply.finish();
      return;
    }
  }
}

// A request of another API on the chat path (the Responses and Messages APIs), turned into the
// chat body it means, parsed and queued; the caller shapes the reply.
struct ChatCall {
  ChatCall(const std::string& chat_body, ServerEnv& env)
      : req((++env.counters.requests, parse_request(chat_body, true, env.request))),
        task(submit(req, env)),
        id(std::to_string(++next_id)),
        created(static_cast<long long>(std::time(nullptr))),
        rb(req, env.request.tokenizer, id, created) {}
  // Not streamed: the whole reply as a chat.completion once done; nothing when the client left.
  std::optional<json> whole(HttpReply& reply) {
    std::vector<Piece> pieces;
    if (!wait_all(*task, reply, pieces)) return std::nullopt;
    return rb.full(pieces, *task);
  }
  const ApiRequest req;
  std::shared_ptr<Task> task;
  const std::string id;
  const long long created;
  const ResponseBuilder rb;
};

// OpenAI's Responses API (responses_api.h) on the chat path.
void responses(const HttpRequest& http, HttpReply& reply, ServerEnv& env) {
  ChatCall call(responses_to_chat(http.body), env);
  const ApiRequest& req = call.req;
  const std::shared_ptr<Task>& task = call.task;
  const std::string& id = call.id;
  const long long created = call.created;
  const ResponseBuilder& rb = call.rb;
  if (!req.stream) {
    if (const auto c = call.whole(reply)) reply.send(json_response(response_object(*c, http.body)));
    return;
  }
  if (!reply.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return task->cancel();
  int seq = 0;
  const std::string msg_id = "msg_" + id;
  json start = {{"id", "resp_" + id}, {"object", "response"}, {"created_at", created}, {"status", "in_progress"},
                {"model", req.model}, {"output", json::array()}, {"error", nullptr}, {"incomplete_details", nullptr},
                {"parallel_tool_calls", true}, {"tool_choice", "auto"}, {"tools", json::array()}};
  // One event per statement: the operands of + are evaluated in no fixed order, and each event
  // takes the next sequence number.
  std::string out = response_event({{"type", "response.created"}, {"response", start}}, seq);
  out += response_event({{"type", "response.in_progress"}, {"response", start}}, seq);
  // The text streams as it comes when it is all the reply is; a call or a reasoning split is known
  // only at the end, so then the reply is held.
  const bool live = !req.tools.active() && !req.reasoning;
  if (live) {
    out += response_event({{"type", "response.output_item.added"}, {"output_index", 0},
                           {"item", {{"type", "message"}, {"id", msg_id}, {"status", "in_progress"}, {"role", "assistant"},
                                     {"content", json::array()}}}}, seq);
    out += response_event({{"type", "response.content_part.added"}, {"item_id", msg_id}, {"output_index", 0}, {"content_index", 0},
                           {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}}, seq);
  }
  std::vector<Piece> all;
  for (;;) {
    std::vector<Piece> pieces;
    const bool done = task->take(pieces, std::chrono::milliseconds(100));
    for (const Piece& p : pieces) {
      if (live && !p.text.empty())
        out += response_event({{"type", "response.output_text.delta"}, {"item_id", msg_id}, {"output_index", 0},
                               {"content_index", 0}, {"delta", p.text}}, seq);
      all.push_back(p);
    }
    if (done) {
      if (!task->error().empty()) {
        out += response_event({{"type", "error"}, {"message", task->error()}, {"code", "server_error"}}, seq);
      } else {
        json r = response_object(rb.full(all, *task), http.body);
        if (live && (r["output"].empty() || r["output"][0]["type"] != "message"))  // an empty reply still has its message
          r["output"].insert(r["output"].begin(), json{{"type", "message"}, {"id", msg_id}, {"status", "completed"}, {"role", "assistant"},
                                                     {"content", json::array({{{"type", "output_text"}, {"text", ""},
                                                                               {"annotations", json::array()}}})}});
        for (const json& e : response_item_events(r, live)) out += response_event(e, seq);
      }
    }
    if (!reply.write(out)) return task->cancel();
    out.clear();
    if (done) {
      reply.finish();
      return;
    }
  }
}

// Anthropic's Messages API (anthropic.h) on the chat path.
void messages(const HttpRequest& http, HttpReply& reply, ServerEnv& env) {
  ChatCall call(anthropic_to_openai(http.body, false), env);
  const ApiRequest& req = call.req;
  const std::shared_ptr<Task>& task = call.task;
  const std::string& id = call.id;
  const ResponseBuilder& rb = call.rb;
  if (!req.stream) {
    if (const auto c = call.whole(reply)) reply.send(json_response(anthropic_message(*c, task->stop_word())));
    return;
  }
  if (!reply.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return task->cancel();
  const json usage0 = {{"input_tokens", req.gen.prompt.size()}, {"output_tokens", 0}};
  std::string out = anthropic_event("message_start", {{"message", {{"id", "msg_" + id}, {"type", "message"}, {"role", "assistant"},
                                                                   {"model", req.model}, {"content", json::array()},
                                                                   {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                                                   {"usage", usage0}}}});
  // Text streams as it comes in block 0; with tools or a reasoning split the reply is held (a call
  // and the end of the reasoning are known only whole).
  const bool hold = req.tools.active() || req.reasoning;
  if (!hold) out += anthropic_event("content_block_start", {{"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
  std::string held;
  std::vector<Piece> all;
  for (;;) {
    std::vector<Piece> pieces;
    const bool done = task->take(pieces, std::chrono::milliseconds(100));
    for (const Piece& p : pieces) {
      if (hold) held += p.text;
      else if (!p.text.empty()) out += anthropic_event("content_block_delta", {{"index", 0}, {"delta", {{"type", "text_delta"}, {"text", p.text}}}});
      all.push_back(p);
    }
    if (done) {
      if (!task->error().empty()) {
        out += anthropic_event("error", {{"error", anthropic_error(ApiError(500, task->error(), "server_error"))["error"]}});
      } else {
        if (!hold) out += anthropic_event("content_block_stop", {{"index", 0}});
        const json m = anthropic_message(rb.full(all, *task), task->stop_word());
        if (hold) {
          for (size_t i = 0; i < m["content"].size(); ++i) {
            const json& b = m["content"][i];
            if (b["type"] == "text") {
              out += anthropic_event("content_block_start", {{"index", i}, {"content_block", {{"type", "text"}, {"text", ""}}}});
              out += anthropic_event("content_block_delta", {{"index", i}, {"delta", {{"type", "text_delta"}, {"text", b["text"]}}}});
            } else {
              out += anthropic_event("content_block_start", {{"index", i}, {"content_block", {{"type", "tool_use"}, {"id", b["id"]},
                                                                                                 {"name", b["name"]}, {"input", json::object()}}}});
              out += anthropic_event("content_block_delta", {{"index", i}, {"delta", {{"type", "input_json_delta"}, {"partial_json", b["input"].dump()}}}});
            }
            out += anthropic_event("content_block_stop", {{"index", i}});
          }
        }
        out += anthropic_event("message_delta", {{"delta", {{"stop_reason", m["stop_reason"]}, {"stop_sequence", m["stop_sequence"]}}},
                                                 {"usage", {{"output_tokens", m["usage"]["output_tokens"]}}}});
        out += anthropic_event("message_stop", json::object());
      }
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
  add("POST", "/v1/completions", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(reply, env.counters, [&] { completion(req, reply, env, false); });
  });
  // llama-server's native completion, under both of its names (/completions is native there too).
  for (const char* path : {"/completion", "/completions"})
    add("POST", path, false, [&env](const HttpRequest& req, HttpReply& reply) {
      guarded(reply, env.counters, [&] { native_completion(req, reply, env); });
    });
  add("POST", "/v1/embeddings", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(reply, env.counters, [&] { reply.send(json_response(env.embedder->serve(req.body, env.request))); });
  });
  add("GET", "/slots", true, [&env](const HttpRequest&, HttpReply& reply) {
    // llama-server's slot list, with what a slot holds here: its conversation's tokens and KV bytes.
    const SchedulerStats st = env.scheduler.stats();
    json slots = json::array();
    for (size_t i = 0; i < st.kv_bytes.size(); ++i)
      slots.push_back({{"id", i},
                       {"n_ctx", env.request.n_ctx},
                       {"is_processing", st.busy[i] != 0},
                       {"n_past", st.history[i]},
                       {"kv_bytes", st.kv_bytes[i]},
                       {"kv_planned_bytes", st.kv_planned[i]}});
    reply.send(json_response(slots));
  });
  add("POST", "/apply-template", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(reply, env.counters, [&] { reply.send(json_response({{"prompt", apply_template(req.body, env.request)}})); });
  });
  add("GET", "/props", true, [&env](const HttpRequest&, HttpReply& reply) {
    const SamplerParams d;
    const auto& v = env.request.tokenizer.vocab();
    const auto piece = [&](int id) { return id >= 0 && static_cast<size_t>(id) < v.tokens.size() ? v.tokens[static_cast<size_t>(id)] : ""; };
    reply.send(json_response(
        {{"default_generation_settings",
          {{"n_ctx", env.request.n_ctx},
           {"params", {{"temperature", d.temp}, {"top_k", d.top_k}, {"top_p", d.top_p}, {"min_p", d.min_p},
                       {"repeat_penalty", d.repeat_penalty}, {"repeat_last_n", d.repeat_last_n}, {"n_predict", -1}}}}},
         {"total_slots", env.scheduler.config().n_slots},
         {"model_alias", env.request.model_id},
         {"model_path", env.model_path},
         {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
         {"endpoint_slots", true},
         {"endpoint_props", false},
         {"endpoint_metrics", true},
         {"chat_template", env.request.chat.template_source()},
         {"bos_token", piece(v.bos)},
         {"eos_token", piece(v.eos)},
         {"build_info", "slake"},
         {"is_sleeping", false}}));
  });
  for (const char* path : {"/v1/models", "/models"})
    add("GET", path, true, [&env](const HttpRequest&, HttpReply& reply) {
      json data = json::array();
      for (const std::string& name : env.aliases.empty() ? std::vector<std::string>{env.request.model_id} : env.aliases)
        data.push_back({{"id", name},
                        {"object", "model"},
                        {"created", env.created},
                        {"owned_by", "slake"},
                        {"meta", {{"n_ctx", env.request.n_ctx}, {"n_vocab", env.request.cfg.n_vocab},
                                  {"n_slots", env.scheduler.config().n_slots}}}});
      reply.send(json_response({{"object", "list"}, {"data", data}}));
    });
  for (const char* path : {"/v1/responses", "/responses"})
    add("POST", path, false, [&env](const HttpRequest& req, HttpReply& reply) {
      guarded(reply, env.counters, [&] { responses(req, reply, env); });
    });
  add("POST", "/v1/messages", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(reply, env.counters, [&] { messages(req, reply, env); }, Shape::Anthropic);
  });
  add("POST", "/v1/messages/count_tokens", false, [&env](const HttpRequest& req, HttpReply& reply) {
    guarded(
        reply, env.counters,
        [&] {
          const ApiRequest r = parse_request(anthropic_to_openai(req.body, true), true, env.request);
          reply.send(json_response({{"input_tokens", r.gen.prompt.size()}}));
        },
        Shape::Anthropic);
  });
  if (env.webui)
    add("GET", "/", true, [](const HttpRequest&, HttpReply& reply) {
      reply.send({200, "text/html; charset=utf-8", kWebuiHtml, {}});
    });
  for (const char* path : {"/health", "/v1/health"})
    add("GET", path, true, [](const HttpRequest&, HttpReply& reply) {
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

namespace {

// The origin of a browser's request when --cors-origins lets it call the API; "" otherwise.
std::string allowed_origin(const HttpRequest& head, const std::vector<std::string>& origins) {
  const std::string* origin = head.header("Origin");
  if (!origin) return "";
  for (const std::string& o : origins)
    if (o == "*" || o == *origin) return *origin;
  return "";
}

}  // namespace

HttpHeaders OpenAiService::reply_headers(const HttpRequest& head) const {
  const std::string origin = allowed_origin(head, env_.cors_origins);
  if (origin.empty()) return {};
  return {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
}

std::optional<HttpResponse> OpenAiService::check_head(const HttpRequest& head) {
  // A browser's preflight comes without the key: answered before the key is checked.
  if (head.method == "OPTIONS") {
    if (allowed_origin(head, env_.cors_origins).empty())
      return json_response(ApiError(403, "this origin may not call the API (--cors-origins)", "invalid_request_error", "",
                                    "origin_not_allowed").body(), 403);
    const std::string* asked = head.header("Access-Control-Request-Headers");
    return HttpResponse{204, "", "",
                        {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                         {"Access-Control-Allow-Headers", asked ? *asked : "Authorization, Content-Type, x-api-key"},
                         {"Access-Control-Max-Age", "600"}}};
  }
  // The health checks and the chat page need no key (the page asks for it and sends it with its calls).
  const bool open = head.path == "/health" || head.path == "/v1/health" || (env_.webui && head.path == "/" && head.method == "GET");
  if (!env_.api_key.empty() && !open) {
    // "Authorization: Bearer KEY" (OpenAI's clients), or "x-api-key: KEY" (Anthropic's).
    const std::string* bearer = head.header("Authorization");
    const std::string* x_key = head.header("x-api-key");
    const std::string given = bearer ? *bearer : x_key ? "Bearer " + *x_key : "";
    const std::string* auth = bearer || x_key ? &given : nullptr;
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
