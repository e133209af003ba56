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

// A reply with tools read as it streams. Text that cannot be part of a call comes out as content
// at once (trimmed as parse_tool_calls trims it: leading and trailing whitespace is held until
// more text follows); a call comes out as soon as its name is read, when it is a known function
// and comes first in the call's object (as the grammar of a required call writes it): its id and
// name, then its arguments' text as it is generated. A call that does not read so is held to
// the end and parsed with parse_tool_calls. For a reply whose calls are well-formed, the
// content and the calls add up to what parse_tool_calls finds in the whole reply (arguments as
// written, where parse_tool_calls writes them compactly). A call once begun is not taken back: one
// whose object never closes (a reply cut short) stays a call, its text after the arguments content.
struct ToolStreamEvent {
  enum Kind { Content, CallStart, CallArguments } kind;
  std::string text;      // Content: the text; CallArguments: the next part of the arguments
  int index = 0;         // the call's, in order (CallStart, CallArguments)
  std::string id, name;  // CallStart
};

class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolRequest& req);
  std::vector<ToolStreamEvent> push(const std::string& text);
  // The end of the reply: what was held.
  std::vector<ToolStreamEvent> finish();
  int calls() const { return calls_; }  // calls begun

 private:
  enum class State { Content, Plain, Header, Arguments, Trailer, Skip, Held };
  void run(std::vector<ToolStreamEvent>& out);
  void content(std::string text, std::vector<ToolStreamEvent>& out);
  void hold(size_t from) {
    state_ = State::Held;
    held_from_ = from;
  }

  const ToolRequest& req_;
  std::string buf_;  // the reply so far
  size_t pos_ = 0;   // read up to here
  State state_ = State::Content;
  size_t call_at_ = 0, args_at_ = 0, args_sent_ = 0, held_from_ = 0;
  int calls_ = 0;
  bool started_ = false;  // content came out
  std::string ws_;        // whitespace held after the last content
};

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
