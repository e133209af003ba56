// OpenAI's Responses API (POST /v1/responses) over the chat path, stateless as llama-server's: a
// request's instructions and input (a string, or message, function_call and function_call_output
// items), function tools, tool_choice, max_output_tokens and text.format become the chat request
// they mean, which parse_request checks as any other; the reply comes back as a response object
// (reasoning, message and function_call output items) or its stream of events (response.created ...
// response.output_text.delta ... response.completed). previous_response_id and the built-in tools
// (web search, file search, ...) are 400s: the server keeps no responses and has no such tools.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace slake::server {

// The OpenAI chat body (JSON text) of a Responses body; throws ApiError (400) naming the field.
std::string responses_to_chat(const std::string& body);

// The response object of a finished reply, from the chat.completion object ResponseBuilder made.
// `status`: "completed", or "in_progress" for response.created's copy (no output yet).
nlohmann::json response_object(const nlohmann::json& completion, const std::string& request_body);

// The events that end a streamed text reply whose message item (the only output of `response`, a
// finished response object) was added and its text sent as deltas: the text, part and item done,
// then response.completed (or .incomplete).
std::vector<nlohmann::json> response_text_done_events(const nlohmann::json& response);

// One server-sent event, "event: TYPE\ndata: JSON\n\n", with the stream's sequence_number.
std::string response_event(nlohmann::json event, int& sequence);

}  // namespace slake::server
