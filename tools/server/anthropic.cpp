#include "anthropic.h"

#include <algorithm>

#include "openai_response.h"
#include "tool_calls.h"

namespace slake::server {

namespace {

using ojson = nlohmann::ordered_json;

// Our tool_use ids are "toolu_" and the call's id (9 characters, as Mistral's templates require).
std::string call_id(const std::string& id) { return id.compare(0, 6, "toolu_") == 0 ? id.substr(6) : id; }

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw bad_field(param, message); }

// A content field: a string, or an array of blocks. Text blocks are joined; tool_use and
// tool_result blocks are handed to `block` (returns false for a type it does not take).
template <typename F>
std::string text_of(const ojson& content, const std::string& where, F&& block) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(where, "'" + where + "' must be a string or an array of content blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad(at, "'" + at + "' must be a block with a 'type'");
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) bad(at, "'" + at + ".text' must be a string");
      text += b["text"].get<std::string>();
    } else if (!block(b, at)) {
      bad(at, "'" + at + "': content blocks of type '" + type + "' are not supported here (text, thinking, tool_use, tool_result)");
    }
  }
  return text;
}

}  // namespace

std::string anthropic_to_openai(const std::string& text, bool count_only) {
  const ojson body = ojson::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  // Read here, or changing nothing by design (metadata, service_tier, speed, inference_geo,
  // cache_control: a slot keeps its conversation's cache anyway).
  // grammar and seed: llama-server's extensions, passed on to the chat request.
  static const char* const kFields[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "temperature",
                                        "top_p", "top_k", "stream", "tools", "tool_choice", "metadata", "thinking",
                                        "service_tier", "speed", "inference_geo", "cache_control", "grammar", "seed"};
  for (const auto& [k, v] : body.items()) {
    (void)v;
    if (std::find(std::begin(kFields), std::end(kFields), k) == std::end(kFields))
      bad(k, "'" + k + "' is not a field of the Messages API this server understands");
  }
  ojson out = ojson::object();
  if (body.contains("model")) out["model"] = body["model"];
  if (body.contains("max_tokens")) out["max_tokens"] = body["max_tokens"];
  else if (!count_only) bad("max_tokens", "'max_tokens' is required");
  for (const char* k : {"temperature", "top_p", "top_k", "stream", "grammar", "seed"})
    if (body.contains(k)) out[k] = body[k];
  // Extended thinking: enabled splits the reply's <think> block out as a thinking block (the
  // chat request's reasoning_format deepseek); disabled asks the template not to think
  // (enable_thinking false, as Qwen3's templates read it). budget_tokens must be a positive integer
  // below max_tokens, as the API requires; the thinking then runs within max_tokens, as
  // llama-server's (whose --reasoning-budget takes only -1 or 0) does.
  if (body.contains("thinking") && !body["thinking"].is_null()) {
    const ojson& t = body["thinking"];
    const std::string type = t.is_object() ? member_or<std::string>(t, "type", "", "thinking.type") : "";
    if (type == "enabled") {
      if (!t.contains("budget_tokens") || !t["budget_tokens"].is_number_integer() || t["budget_tokens"].get<long long>() < 1 ||
          (body.contains("max_tokens") && body["max_tokens"].is_number_integer() &&
           t["budget_tokens"].get<long long>() >= body["max_tokens"].get<long long>()))
        bad("thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer below max_tokens");
      out["reasoning_format"] = "deepseek";
    } else if (type == "disabled") {
      out["chat_template_kwargs"] = {{"enable_thinking", false}};
    } else {
      bad("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    }
  }
  if (body.contains("stop_sequences")) out["stop"] = body["stop_sequences"];

  ojson messages = ojson::array();
  if (body.contains("system") && !body["system"].is_null())
    messages.push_back({{"role", "system"}, {"content", text_of(body["system"], "system", [](const ojson&, const std::string&) { return false; })}});
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad("messages", "'messages' must be a non-empty array");
  const ojson& in = body["messages"];
  for (size_t i = 0; i < in.size(); ++i) {
    const ojson& m = in[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    const std::string role = m.is_object() && m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (role != "user" && role != "assistant") bad(where + ".role", "'" + where + ".role' must be user or assistant");
    if (!m.contains("content")) bad(where + ".content", "'" + where + ".content' is required");
    ojson calls = ojson::array(), results = ojson::array();
    const std::string content = text_of(m["content"], where + ".content", [&](const ojson& b, const std::string& at) {
      const std::string type = b["type"].get<std::string>();
      if (type == "tool_use" && role == "assistant") {
        if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string() ||
            !b.contains("input") || !b["input"].is_object())
          bad(at, "'" + at + "' must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\": object}");
        calls.push_back({{"id", call_id(b["id"].get<std::string>())}, {"type", "function"}, {"function", {{"name", b["name"]}, {"arguments", b["input"].dump()}}}});
        return true;
      }
      // A thinking block sent back with an earlier reply: dropped, as the API drops earlier turns'
      // thinking from the context.
      if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") return true;
      if (type == "tool_result" && role == "user") {
        if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) bad(at, "'" + at + ".tool_use_id' must be a string");
        const std::string result = b.contains("content") ? text_of(b["content"], at + ".content", [](const ojson&, const std::string&) { return false; }) : "";
        results.push_back({{"role", "tool"}, {"tool_call_id", call_id(b["tool_use_id"].get<std::string>())}, {"content", result}});
        return true;
      }
      return false;
    });
    // Tool results answer the calls of the turn before, so they come first.
    for (const ojson& r : results) messages.push_back(r);
    if (!calls.empty()) messages.push_back({{"role", "assistant"}, {"content", content}, {"tool_calls", calls}});
    else if (!content.empty() || results.empty()) messages.push_back({{"role", role}, {"content", content}});
  }
  out["messages"] = messages;

  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) bad("tools", "'tools' must be an array");
    out["tools"] = chat_tools(body["tools"], [](const ojson& t, const std::string& at) {
      if (!t.is_object() || !t.contains("name") || !t.contains("input_schema"))
        bad(at, "'" + at + "' must be {\"name\", \"description\", \"input_schema\"} (server tools are not supported)");
      ojson fn = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      return fn;
    });
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    const std::string type = c.is_object() && c.contains("type") && c["type"].is_string() ? c["type"].get<std::string>() : "";
    if (type == "auto" || type == "none") out["tool_choice"] = type;
    else if (type == "any") out["tool_choice"] = "required";
    else if (type == "tool" && c.contains("name")) out["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    else bad("tool_choice", "'tool_choice' must be {\"type\": auto, any, tool (with name) or none}");
    if (c.contains("disable_parallel_tool_use"))
      out["parallel_tool_calls"] = !member_or<bool>(c, "disable_parallel_tool_use", false, "tool_choice.disable_parallel_tool_use");
  }
  return out.dump();
}

std::string anthropic_stop_reason(const std::string& finish, const std::string& stop_word) {
  if (finish == "tool_calls") return "tool_use";
  if (finish == "length") return "max_tokens";
  return stop_word.empty() ? "end_turn" : "stop_sequence";
}

nlohmann::json anthropic_message(const nlohmann::json& c, const std::string& stop_word) {
  const nlohmann::json& choice = c["choices"][0];
  const nlohmann::json& msg = choice["message"];
  nlohmann::json content = nlohmann::json::array();
  // A thinking model's reasoning, split out: a thinking block first (unsigned: nothing here signs it).
  if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string() && !msg["reasoning_content"].get<std::string>().empty())
    content.push_back({{"type", "thinking"}, {"thinking", msg["reasoning_content"]}, {"signature", ""}});
  if (msg["content"].is_string() && !msg["content"].get<std::string>().empty())
    content.push_back({{"type", "text"}, {"text", msg["content"]}});
  if (msg.contains("tool_calls"))
    for (const auto& call : msg["tool_calls"])
      content.push_back({{"type", "tool_use"},
                         {"id", "toolu_" + call["id"].get<std::string>()},
                         {"name", call["function"]["name"]},
                         {"input", nlohmann::json::parse(call["function"]["arguments"].get<std::string>())}});
  const std::string reason = anthropic_stop_reason(choice["finish_reason"].get<std::string>(), stop_word);
  return {{"id", "msg_" + c["id"].get<std::string>()},
          {"type", "message"},
          {"role", "assistant"},
          {"model", c["model"]},
          {"content", content},
          {"stop_reason", reason},
          {"stop_sequence", reason == "stop_sequence" ? nlohmann::json(stop_word) : nlohmann::json()},
          {"usage", {{"input_tokens", c["usage"]["prompt_tokens"]}, {"output_tokens", c["usage"]["completion_tokens"]}}}};
}

std::string anthropic_event(const std::string& name, nlohmann::json data) {
  nlohmann::json d = {{"type", name}};
  d.update(data);
  return "event: " + name + "\ndata: " + dump(d) + "\n\n";
}

nlohmann::json anthropic_error(const ApiError& e) {
  const char* type = e.status == 401   ? "authentication_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status == 413 ? "request_too_large"
                     : e.status == 503 ? "overloaded_error"
                     : e.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

}  // namespace slake::server
