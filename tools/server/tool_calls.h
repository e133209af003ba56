// OpenAI's tool calls over a model's own chat template: the tools a request offers, the grammar
// that makes a call well-formed when one is required, and the calls found in a finished reply.
// The call syntax is the template family's, recognised from the template's text:
//   hermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>   (Hermes 2/3, Qwen2.5)
//   mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]           (Mistral Nemo, v0.3)
//   llama3   {"name": ..., "parameters": {...}}, after <|python_tag|> or not (Llama 3.1-3.3)
//   generic  {"name": ..., "arguments": {...}}                               (any other template that takes tools)
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace slake::server {

enum class ToolFormat { None, Hermes, Mistral, Llama3, Generic };

// The family of a Jinja chat template's tool calls; None when it never mentions tools.
ToolFormat detect_tool_format(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

struct ToolRequest {
  std::string tools_json;          // the tools as sent, for the template ("" : none offered)
  std::vector<std::string> names;  // the functions, in order
  std::string choice = "auto";     // auto, none, required, or the one function that must be called
  bool parallel = true;            // several calls in one reply
  ToolFormat format = ToolFormat::None;
  bool active() const { return !tools_json.empty() && choice != "none"; }
};

// GBNF for a reply that is a call (or, parallel, several) of the tools `req` allows (the named one
// for a named choice), each function's arguments held to its parameters' JSON schema.
// `tools` is the request's tools array. Throws slake::Error for a schema the converter refuses.
std::string tool_call_gbnf(const nlohmann::ordered_json& tools, const ToolRequest& req);

struct ToolCall {
  std::string id;         // 9 letters and digits: the length Mistral's templates require of an id
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedReply {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ToolCall> calls;
};

// The calls of `req`'s functions in a finished reply, in `req.format`'s syntax; text that is not a
// well-formed call of a known function stays content.
ParsedReply parse_tool_calls(const std::string& text, const ToolRequest& req);

// The chat request's tools array from another API's `tools` (Anthropic's, the Responses API's):
// `one(tool, "tools[i]")` gives each one's {"name", "description"?, "parameters"} or throws.
template <typename F>
nlohmann::ordered_json chat_tools(const nlohmann::ordered_json& tools, F&& one) {
  if (!tools.is_array()) throw std::invalid_argument("tools");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i)
    out.push_back({{"type", "function"}, {"function", one(tools[i], "tools[" + std::to_string(i) + "]")}});
  return out;
}

// A tool call id: 9 letters and digits, fresh each call.
std::string new_tool_call_id();

}  // namespace slake::server
