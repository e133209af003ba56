#include "tool_calls.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>

#include "slake/error.h"
#include "slake/grammar/grammar.h"

namespace slake::server {

namespace {

using ojson = nlohmann::ordered_json;

// The end of the JSON object or array that starts at text[pos] (one past its closing bracket), or
// npos when it does not close: brackets counted outside strings.
size_t json_end(const std::string& text, size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// {"name": known, "arguments" (or llama3's "parameters"): object} as a call; false otherwise.
bool as_call(const ojson& j, const ToolRequest& req, ToolCall& out) {
  const char* args_key = req.format == ToolFormat::Llama3 ? "parameters" : "arguments";
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (std::find(req.names.begin(), req.names.end(), name) == req.names.end()) return false;
  const auto args = j.find(args_key);
  if (args == j.end() || !args->is_object()) return false;
  out = {new_tool_call_id(), name, args->dump()};
  return true;
}

}  // namespace

ToolFormat detect_tool_format(const std::string& src) {
  if (src.find("tools") == std::string::npos) return ToolFormat::None;
  if (src.find("<tool_call>") != std::string::npos) return ToolFormat::Hermes;
  if (src.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::Mistral;
  if (src.find("\"parameters\"") != std::string::npos) return ToolFormat::Llama3;
  return ToolFormat::Generic;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Mistral: return "mistral";
    case ToolFormat::Llama3: return "llama3";
    case ToolFormat::Generic: return "generic";
    case ToolFormat::None: break;
  }
  return "none";
}

std::string new_tool_call_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937_64 rng(salt + counter++);
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += kAlnum[rng() % 62];
  return id;
}

std::string tool_call_gbnf(const ojson& tools, const ToolRequest& req) {
  const char* args_key = req.format == ToolFormat::Llama3 ? "parameters" : "arguments";
  ojson any = ojson::array();
  // The tools' definitions ($defs, definitions) move to the root of the one schema, where
  // "#/$defs/NAME" finds them; two tools may not define one name differently.
  ojson defs = ojson::object();
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (req.choice != "auto" && req.choice != "required" && req.choice != name) continue;
    ojson params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : ojson{{"type", "object"}};
    for (const char* key : {"$defs", "definitions"}) {
      if (!params.contains(key)) continue;
      if (!params[key].is_object()) fail("tool " + name + ": '" + key + "' must be an object");
      for (const auto& [k, v] : params[key].items()) {
        if (defs.contains(k) && defs[k] != v) fail("tools define '" + k + "' differently; give the definitions distinct names");
        defs[k] = v;
      }
      params.erase(key);
    }
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                   {"required", {"name", args_key}},
                   {"additionalProperties", false}});
  }
  ojson root = {{"anyOf", any}};
  if (!defs.empty()) root["$defs"] = root["definitions"] = defs;
  std::string g = json_schema_to_gbnf(root.dump());
  // The schema's root becomes one call; the root wraps the calls in the family's syntax.
  const size_t at = g.compare(0, 9, "root ::= ") == 0 ? 0 : g.find("\nroot ::= ") + 1;
  g.replace(at, 9, "call ::= ");
  const bool several = req.parallel && req.format != ToolFormat::Llama3 && req.format != ToolFormat::Generic;
  switch (req.format) {
    case ToolFormat::Hermes:
      g += std::string("root ::= block") + (several ? " (\"\\n\" block)*" : "") +
           "\nblock ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
      break;
    case ToolFormat::Mistral:
      g += std::string("root ::= \"[TOOL_CALLS][\" call") + (several ? " (\", \" call)*" : "") + " \"]\"\n";
      break;
    default:
      g += "root ::= call\n";
  }
  return g;
}

ParsedReply parse_tool_calls(const std::string& text, const ToolRequest& req) {
  ParsedReply out;
  std::string rest;
  if (req.format == ToolFormat::Hermes) {
    size_t pos = 0;
    for (;;) {
      const size_t open = text.find("<tool_call>", pos);
      const size_t close = open == std::string::npos ? open : text.find("</tool_call>", open);
      if (close == std::string::npos) break;
      const std::string body = trim(text.substr(open + 11, close - open - 11));
      const ojson j = ojson::parse(body, nullptr, false);
      ToolCall c;
      if (!j.is_discarded() && as_call(j, req, c)) {
        out.calls.push_back(std::move(c));
        rest += text.substr(pos, open - pos);
      } else {
        rest += text.substr(pos, close + 12 - pos);
      }
      pos = close + 12;
    }
    rest += text.substr(pos);
  } else if (req.format == ToolFormat::Mistral) {
    // [TOOL_CALLS][call, call, ...]: each whole call in order (a reply cut short keeps those it finished).
    const size_t at = text.find("[TOOL_CALLS]");
    size_t pos = at == std::string::npos ? at : text.find_first_not_of(" \n", at + 12);
    bool ok = pos != std::string::npos && text[pos] == '[';
    std::vector<ToolCall> calls;
    for (++pos; ok;) {
      pos = text.find_first_not_of(" \n\t,", pos);
      if (pos == std::string::npos || text[pos] != '{') break;
      const size_t end = json_end(text, pos);
      const ojson j = end == std::string::npos ? ojson() : ojson::parse(text.substr(pos, end - pos), nullptr, false);
      ToolCall c;
      if (j.is_discarded() || j.is_null() || !as_call(j, req, c)) break;
      calls.push_back(std::move(c));
      pos = end;
    }
    if (ok && !calls.empty()) {
      out.calls = std::move(calls);
      const size_t close = pos == std::string::npos ? pos : text.find(']', pos);
      rest = text.substr(0, at) + (close == std::string::npos ? "" : text.substr(close + 1));
    } else {
      rest = text;
    }
  } else {
    // A reply that is a call: the JSON object at its start (after <|python_tag|>).
    std::string t = trim(text);
    if (t.compare(0, 14, "<|python_tag|>") == 0) t = trim(t.substr(14));
    const size_t end = !t.empty() && t[0] == '{' ? json_end(t, 0) : std::string::npos;
    const ojson j = end == std::string::npos ? ojson() : ojson::parse(t.substr(0, end), nullptr, false);
    ToolCall c;
    if (!j.is_discarded() && as_call(j, req, c)) {
      out.calls.push_back(std::move(c));
      rest = t.substr(end);
    } else {
      rest = text;
    }
  }
  out.content = out.calls.empty() ? text : trim(rest);
  return out;
}

}  // namespace slake::server
