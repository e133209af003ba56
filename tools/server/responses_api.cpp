#include "responses_api.h"

#include <algorithm>

#include "api_error.h"
#include "openai_response.h"
#include "tool_calls.h"

namespace slake::server {

namespace {

using ojson = nlohmann::ordered_json;
using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw bad_field(param, message); }

// A message item's text: a string, or input_text / output_text parts joined.
std::string item_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(where, "'" + where + "' must be a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& p = content[i];
    const std::string type = p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
    if ((type != "input_text" && type != "output_text") || !p.contains("text") || !p["text"].is_string())
      bad(where + "[" + std::to_string(i) + "]", "content parts must be input_text or output_text with a 'text' (only text is supported)");
    text += p["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::string responses_to_chat(const std::string& text) {
  const ojson body = ojson::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  // Read here, or changing nothing by design (the server keeps no responses: store, metadata, user).
  static const char* const kFields[] = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
                                        "stream", "tools", "tool_choice", "parallel_tool_calls", "text", "store",
                                        "metadata", "user", "previous_response_id", "truncation", "service_tier"};
  // The chat request's own extensions pass through as they are (llama-server's samplers and
  // grammar, slake's KV policy), checked there.
  static const char* const kChatExtensions[] = {
      "seed", "grammar", "top_k", "min_p", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
      "logit_bias", "typical_p", "xtc_probability", "xtc_threshold", "mirostat", "mirostat_tau", "mirostat_eta",
      "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "ignore_eos",
      "kv_policy", "kv_budget", "kv_window", "kv_observe", "kv_prefill_chunk", "kv_recall_pages", "kv_store_type",
      "kv_recall_score", "kv_recall_every", "kv_selector", "kv_ahakv", "kv_sre_mass", "kv_sre_floor",
      "reasoning_format", "chat_template_kwargs"};
  ojson out = ojson::object();
  for (const auto& [k, v] : body.items()) {
    if (std::find(std::begin(kChatExtensions), std::end(kChatExtensions), k) != std::end(kChatExtensions)) {
      out[k] = v;
      continue;
    }
    if (std::find(std::begin(kFields), std::end(kFields), k) == std::end(kFields))
      bad(k, "'" + k + "' is not a field of the Responses API this server understands");
  }
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null())
    bad("previous_response_id", "'previous_response_id' is not supported: the server keeps no responses; send the whole input");
  if (body.contains("truncation") && !(body["truncation"].is_null() || body["truncation"] == "disabled"))
    bad("truncation", "'truncation' must be disabled: a prompt past the context is refused, not cut");

  if (body.contains("model")) out["model"] = body["model"];
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) out["max_tokens"] = body["max_output_tokens"];
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls"})
    if (body.contains(k) && !body[k].is_null()) out[k] = body[k];

  ojson messages = ojson::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) bad("instructions", "'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!body.contains("input")) bad("input", "'input' is required");
  const ojson& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const ojson& item = input[i];
      const std::string where = "input[" + std::to_string(i) + "]";
      if (!item.is_object()) bad(where, "'" + where + "' must be an object");
      const std::string type = item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>() : "message";
      if (type == "message") {
        const std::string role = item.contains("role") && item["role"].is_string() ? item["role"].get<std::string>() : "";
        if (role != "user" && role != "system" && role != "developer" && role != "assistant")
          bad(where + ".role", "'" + where + ".role' must be user, system, developer or assistant");
        if (!item.contains("content")) bad(where + ".content", "'" + where + ".content' is required");
        messages.push_back({{"role", role}, {"content", item_text(item["content"], where + ".content")}});
      } else if (type == "function_call") {
        for (const char* k : {"call_id", "name", "arguments"})
          if (!item.contains(k) || !item[k].is_string()) bad(where + "." + k, "'" + where + "." + k + "' must be a string");
        const ojson call = {{"id", item["call_id"]}, {"type", "function"},
                            {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
        // Calls in a row are one assistant turn.
        if (!messages.empty() && messages.back()["role"] == "assistant" && messages.back().contains("tool_calls"))
          messages.back()["tool_calls"].push_back(call);
        else
          messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({call})}});
      } else if (type == "function_call_output") {
        if (!item.contains("call_id") || !item["call_id"].is_string()) bad(where + ".call_id", "'" + where + ".call_id' must be a string");
        if (!item.contains("output") || !item["output"].is_string()) bad(where + ".output", "'" + where + ".output' must be a string");
        messages.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", item["output"]}});
      } else {
        bad(where + ".type", "input items of type '" + type + "' are not supported (message, function_call, function_call_output)");
      }
    }
  } else {
    bad("input", "'input' must be a string or an array of items");
  }
  out["messages"] = messages;

  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) bad("tools", "'tools' must be an array");
    out["tools"] = chat_tools(body["tools"], [](const ojson& t, const std::string& at) {
      if (!t.is_object() || member_or<std::string>(t, "type", "", at + ".type") != "function" || !t.contains("name"))
        bad(at, "'" + at + "': only function tools ({\"type\": \"function\", \"name\", \"parameters\"}) are supported");
      ojson fn = {{"name", t["name"]}};
      for (const char* k : {"description", "parameters"})
        if (t.contains(k) && !t[k].is_null()) fn[k] = t[k];
      return fn;
    });
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c.is_string()) out["tool_choice"] = c;
    else if (c.is_object() && member_or<std::string>(c, "type", "", "tool_choice.type") == "function" && c.contains("name"))
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    else bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}");
  }
  if (body.contains("text") && !body["text"].is_null()) {
    const ojson& t = body["text"];
    const ojson* f = t.is_object() && t.contains("format") ? &t["format"] : nullptr;
    const std::string type = f && f->is_object() && f->contains("type") && (*f)["type"].is_string() ? (*f)["type"].get<std::string>() : "";
    if (type == "json_schema") {
      if (!f->contains("schema")) bad("text.format", "'text.format.schema' is required");
      out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", member_or<std::string>(*f, "name", "schema", "text.format.name")}, {"schema", (*f)["schema"]}}}};
    } else if (type == "json_object") {
      out["response_format"] = {{"type", "json_object"}};
    } else if (type != "text") {
      bad("text.format", "'text.format.type' must be text, json_object or json_schema");
    }
  }
  return out.dump();
}

json response_object(const json& c, const std::string& request_body) {
  const json& choice = c["choices"][0];
  const json& msg = choice["message"];
  const std::string id = c["id"].get<std::string>();
  json output = json::array();
  // A thinking model's reasoning (reasoning_content) comes first, as a reasoning item.
  if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string())
    output.push_back({{"type", "reasoning"},
                      {"id", "rs_" + id},
                      {"summary", json::array()},
                      {"content", json::array({{{"type", "reasoning_text"}, {"text", msg["reasoning_content"]}}})}});
  if (msg["content"].is_string() && !msg["content"].get<std::string>().empty())
    output.push_back({{"type", "message"},
                      {"id", "msg_" + id},
                      {"status", "completed"},
                      {"role", "assistant"},
                      {"content", json::array({{{"type", "output_text"}, {"text", msg["content"]}, {"annotations", json::array()}}})}});
  if (msg.contains("tool_calls"))
    for (const json& call : msg["tool_calls"])
      output.push_back({{"type", "function_call"},
                        {"id", "fc_" + call["id"].get<std::string>()},
                        {"call_id", call["id"]},
                        {"name", call["function"]["name"]},
                        {"arguments", call["function"]["arguments"]},
                        {"status", "completed"}});
  const bool cut = choice["finish_reason"] == "length";
  const json req = json::parse(request_body, nullptr, false);
  const auto echo = [&](const char* k, json dflt) { return req.is_object() && req.contains(k) && !req[k].is_null() ? req[k] : dflt; };
  return {{"id", "resp_" + id},
          {"object", "response"},
          {"created_at", c["created"]},
          {"status", cut ? "incomplete" : "completed"},
          {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json()},
          {"error", nullptr},
          {"model", c["model"]},
          {"instructions", echo("instructions", nullptr)},
          {"output", output},
          {"parallel_tool_calls", echo("parallel_tool_calls", true)},
          {"tool_choice", echo("tool_choice", "auto")},
          {"tools", echo("tools", json::array())},
          {"temperature", echo("temperature", nullptr)},
          {"top_p", echo("top_p", nullptr)},
          {"max_output_tokens", echo("max_output_tokens", nullptr)},
          {"usage",
           {{"input_tokens", c["usage"]["prompt_tokens"]},
            {"input_tokens_details", {{"cached_tokens", c["usage"]["prompt_tokens_details"]["cached_tokens"]}}},
            {"output_tokens", c["usage"]["completion_tokens"]},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", c["usage"]["total_tokens"]}}}};
}

std::vector<json> response_text_done_events(const json& response) {
  std::vector<json> ev;
  const json& item = response["output"][0];
  const json part = item["content"][0];
  ev.push_back({{"type", "response.output_text.done"}, {"item_id", item["id"]}, {"output_index", 0}, {"content_index", 0},
                {"text", part["text"]}});
  ev.push_back({{"type", "response.content_part.done"}, {"item_id", item["id"]}, {"output_index", 0}, {"content_index", 0},
                {"part", part}});
  ev.push_back({{"type", "response.output_item.done"}, {"output_index", 0}, {"item", item}});
  ev.push_back({{"type", response["status"] == "completed" ? "response.completed" : "response.incomplete"}, {"response", response}});
  return ev;
}

std::string response_event(json event, int& sequence) {
  event["sequence_number"] = sequence++;
  return "event: " + event["type"].get<std::string>() + "\ndata: " + dump(event) + "\n\n";
}

}  // namespace slake::server
