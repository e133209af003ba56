// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) over the chat path: a
// request becomes the OpenAI chat request it means (system, text, tool_use and tool_result
// blocks, tools with input_schema, tool_choice auto/any/tool/none, stop_sequences, the sampling
// fields), which parse_request checks as any other; the reply comes back as Anthropic's message
// (text and tool_use blocks, stop_reason end_turn / max_tokens / stop_sequence / tool_use) or its
// stream of events (message_start, content_block_start / _delta / _stop, message_delta,
// message_stop). Errors are Anthropic's {"type": "error", "error": {"type", "message"}}.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "api_error.h"

namespace slake::server {

// The OpenAI chat body (JSON text) of an Anthropic Messages body. Throws ApiError (400) naming
// the Anthropic field. `count_only`: /count_tokens, where max_tokens is not required.
std::string anthropic_to_openai(const std::string& body, bool count_only);

// The Anthropic message of a finished reply, from the chat.completion object ResponseBuilder
// made; `stop_word` is the stop string that ended it ("" : none).
nlohmann::json anthropic_message(const nlohmann::json& completion, const std::string& stop_word);

// Anthropic's stop_reason for OpenAI's finish_reason.
std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_word);

// One server-sent event as Anthropic sends it: "event: NAME\ndata: JSON\n\n" (data's "type" is NAME).
std::string anthropic_event(const std::string& name, nlohmann::json data);

// An error as Anthropic's API answers it.
nlohmann::json anthropic_error(const ApiError& e);

}  // namespace slake::server
