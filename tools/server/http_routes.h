// The HTTP endpoints of slake-server on a cpp-httplib server:
//   POST /v1/chat/completions, /v1/completions   OpenAI's, streamed as server-sent events on request
//   GET  /v1/models                               the one model served
//   GET  /health                                  {"status": "ok"} (no API key needed)
//   GET  /metrics                                 Prometheus text (metrics.h)
//   POST /tokenize, /detokenize                   llama-server's: {"content"} <-> {"tokens"}
// Every error is OpenAI's error object with its status. With --api-key, every endpoint but /health
// needs "Authorization: Bearer KEY" (401 otherwise).
#pragma once
#include <httplib.h>

#include <string>

#include "chat_prompt.h"
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
  long long created;  // when the model was loaded, for /v1/models
};

// Registers the routes. `env` must outlive the server.
void add_routes(httplib::Server& svr, ServerEnv& env);

}  // namespace slake::server
