// libFuzzer target: an OpenAI request body through the server's parsing and validation
// (tools/server/openai_request.cpp: JSON, every field, KV policy resolution, messages through a
// ChatML template, prompt tokenization and the context bound), no model run. Any input must give a
// request or throw ApiError (the 4xx the client gets); ASan/UBSan catch everything else.
#include <cstdint>
#include <string>

#include "api_error.h"
#include "request_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::Env env;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const bool chat : {false, true}) {
    try {
      slake::server::parse_request(body, chat, env.request);
    } catch (const slake::server::ApiError&) {
    }
  }
  return 0;
}
