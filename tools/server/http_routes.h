// The HTTP endpoints of slake-server, served by http_server.h:
//   POST /v1/chat/completions, /v1/completions   OpenAI's, streamed as server-sent events on request
//   POST /v1/responses                           OpenAI's Responses API, stateless (responses_api.h)
//   POST /v1/messages, /v1/messages/count_tokens Anthropic's Messages API (anthropic.h)
//   POST /completion, /completions               llama-server's native completion (llama_native.h)
//   POST /apply-template, GET /props             llama-server's
//   GET  /v1/models                               the one model served
//   GET  /health, /v1/health                      {"status": "ok"} (no API key needed)
//   GET  /metrics                                 Prometheus text (metrics.h)
//   POST /tokenize, /detokenize                   llama-server's: {"content"} <-> {"tokens"}
//   POST /v1/embeddings                           pooled final hidden states (embeddings.h)
//   GET  /                                        the chat page (webui/index.html; no API key needed)
// OPTIONS is a CORS preflight, answered for the origins of --cors-origins (403 for others).
// Every error is OpenAI's error object with its status (Anthropic's on its API). With --api-key,
// every endpoint but the health checks needs "Authorization: Bearer KEY" or "x-api-key: KEY": a
// request without it is answered 401 before its body is read.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chat_prompt.h"
#include "embeddings.h"
#include "http_server.h"
#include "metrics.h"
#include "openai_request.h"
#include "scheduler.h"
#include "slake/tokenizer/tokenizer.h"

namespace slake::server {

struct ServerEnv {
  RequestEnv request;
  Scheduler& scheduler;
  HttpCounters& counters;
  std::string api_key;
  long long created;       // when the model was loaded, for /v1/models
  std::string model_path;  // -m, for /props
  std::vector<std::string> cors_origins = {};  // --cors-origins: pages that may call the API ("*": any)
  std::vector<std::string> aliases = {};       // --alias: the model's names, its id first
  Embedder* embedder = nullptr;                // /v1/embeddings
  bool webui = true;                           // the chat page at / (--no-webui: none)
  std::string slot_save_path = "";             // slot state files (--slot-save-path; "": none)
};

// The API key and CORS checks of a request's head, before its body: an OPTIONS preflight is
// answered (204, or 403 for an origin not in `cors_origins`); without the key (`api_key` not "",
// the path not `open`) a 401. nullopt: the request goes on.
std::optional<HttpResponse> check_access(const HttpRequest& head, const std::string& api_key,
                                         const std::vector<std::string>& cors_origins, bool open, HttpCounters& counters);
// Access-Control-Allow-Origin for an origin in `cors_origins`.
HttpHeaders cors_headers(const HttpRequest& head, const std::vector<std::string>& cors_origins);
// Whether a model's endpoints (OpenAiService) include `method` `path` (POST /slots/N for any N), so
// that router mode can refuse an unknown endpoint before it loads a model for it.
bool model_endpoint(const std::string& method, const std::string& path);
// The value of `key` in the target's query string (?a=b&c=d), percent-decoded; "" when absent.
std::string query_value(const std::string& target, const std::string& key);

class OpenAiService final : public HttpService {
 public:
  explicit OpenAiService(ServerEnv& env);  // `env` must outlive the service
  std::optional<HttpResponse> check_head(const HttpRequest& head) override;
  bool quick(const HttpRequest& head) const override;
  void serve(const HttpRequest& req, HttpReply& reply) override;
  HttpResponse error(const HttpError& e) const override;
  // CORS: Access-Control-Allow-Origin for an origin in --cors-origins.
  HttpHeaders reply_headers(const HttpRequest& head) const override;

 private:
  struct Route {
    std::string method, path;
    bool quick;  // fast and bounded: served on the I/O thread
    std::function<void(const HttpRequest&, HttpReply&)> serve;
  };
  const Route* find(const HttpRequest& head) const;
  ServerEnv& env_;
  std::vector<Route> routes_;
};

}  // namespace slake::server
