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
  out.content = trim(rest);
  return out;
}

// ToolCallStream

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

size_t skip_ws(const std::string& s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

enum class Read { More, Bad, Ok };

// `lit` at s[p]: Ok (p moved past it), More (s ends inside it) or Bad.
Read literal(const std::string& s, size_t& p, const std::string& lit) {
  const size_t n = std::min(lit.size(), s.size() - p);
  if (s.compare(p, n, lit, 0, n) != 0) return Read::Bad;
  if (n < lit.size()) return Read::More;
  p += n;
  return Read::Ok;
}

// The call object's head at s[p]: '{', "name": STRING, ',', "arguments" (llama3: "parameters")
// ':', each after optional whitespace; p ends at the arguments' '{'.
Read call_head(const std::string& s, size_t& p, const char* args_key, std::string* name) {
  const auto lit = [&](const std::string& l) {
    p = skip_ws(s, p);
    return p == s.size() ? Read::More : literal(s, p, l);
  };
  for (const char* l : {"{", "\"name\"", ":"})
    if (const Read r = lit(l); r != Read::Ok) return r;
  p = skip_ws(s, p);
  if (p == s.size()) return Read::More;
  if (s[p] != '"') return Read::Bad;
  size_t q = p + 1;
  while (q < s.size() && s[q] != '"') q += s[q] == '\\' ? 2 : 1;
  if (q >= s.size()) return Read::More;
  const ojson n = ojson::parse(s.substr(p, q + 1 - p), nullptr, false);
  if (n.is_discarded()) return Read::Bad;
  *name = n.get<std::string>();
  p = q + 1;
  for (const std::string& l : {std::string(","), "\"" + std::string(args_key) + "\"", std::string(":"), std::string("{")})
    if (const Read r = lit(l); r != Read::Ok) return r;
  --p;  // at the arguments' '{'
  return Read::Ok;
}

ToolStreamEvent text_event(std::string text) {
  ToolStreamEvent e{ToolStreamEvent::Content, std::move(text), 0, "", ""};
  return e;
}

ToolStreamEvent args_event(std::string text, int index) {
  ToolStreamEvent e{ToolStreamEvent::CallArguments, std::move(text), index, "", ""};
  return e;
}

// The longest suffix of s[from..] that is a proper prefix of `marker`.
size_t marker_prefix(const std::string& s, size_t from, const std::string& marker) {
  for (size_t n = std::min(marker.size() - 1, s.size() - from); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

}  // namespace

ToolCallStream::ToolCallStream(const ToolRequest& req) : req_(req) {}

void ToolCallStream::content(std::string text, std::vector<ToolStreamEvent>& out) {
  if (!started_) {
    const size_t a = skip_ws(text, 0);
    text.erase(0, a);
  }
  size_t last = text.size();
  while (last > 0 && is_ws(text[last - 1])) --last;
  if (last == 0) {
    if (started_) ws_ += text;
    return;
  }
  out.push_back(text_event(ws_ + text.substr(0, last)));
  ws_ = text.substr(last);
  started_ = true;
}

std::vector<ToolStreamEvent> ToolCallStream::push(const std::string& text) {
  buf_ += text;
  std::vector<ToolStreamEvent> out;
  run(out);
  return out;
}

void ToolCallStream::run(std::vector<ToolStreamEvent>& out) {
  const bool marked = req_.format == ToolFormat::Hermes || req_.format == ToolFormat::Mistral;
  const std::string marker = req_.format == ToolFormat::Hermes ? "<tool_call>" : "[TOOL_CALLS]";
  const char* args_key = req_.format == ToolFormat::Llama3 ? "parameters" : "arguments";
  for (;;) {
    switch (state_) {
      case State::Plain:
        content(buf_.substr(pos_), out);
        pos_ = buf_.size();
        return;
      case State::Held:
        return;
      case State::Skip: {  // what parse_tool_calls drops: up to the list's ']'
        const size_t close = buf_.find(']', pos_);
        if (close == std::string::npos) return;
        pos_ = close + 1;
        state_ = State::Plain;
        break;
      }
      case State::Content: {
        if (marked) {
          const size_t at = buf_.find(marker, pos_);
          if (at == std::string::npos) {
            const size_t keep = marker_prefix(buf_, pos_, marker);
            content(buf_.substr(pos_, buf_.size() - keep - pos_), out);
            pos_ = buf_.size() - keep;
            return;
          }
          content(buf_.substr(pos_, at - pos_), out);
          pos_ = at + marker.size();
          call_at_ = at;
          if (req_.format == ToolFormat::Mistral) {  // [TOOL_CALLS] [ call, call ]
            size_t p = skip_ws(buf_, pos_);
            if (p == buf_.size()) {
              pos_ = at;  // read again when more comes
              return;
            }
            if (buf_[p] != '[') return hold(at);
            pos_ = p + 1;
          }
          state_ = State::Header;
          break;
        }
        // Llama 3 and the generic form: a call is the reply's start, after <|python_tag|> or not.
        if (calls_ > 0 || started_) {
          state_ = State::Plain;
          break;
        }
        size_t p = skip_ws(buf_, 0);
        if (p == buf_.size()) return;
        size_t q = p;
        const Read tag = literal(buf_, q, "<|python_tag|>");
        if (tag == Read::More) return;
        if (tag == Read::Ok) p = skip_ws(buf_, q);
        if (p == buf_.size()) return;
        if (buf_[p] != '{') {
          state_ = State::Plain;
          break;
        }
        pos_ = p;
        call_at_ = 0;
        state_ = State::Header;
        break;
      }
      case State::Header: {
        size_t p = pos_;
        std::string name;
        const Read r = call_head(buf_, p, args_key, &name);
        if (r == Read::More) return;
        if (r == Read::Bad || std::find(req_.names.begin(), req_.names.end(), name) == req_.names.end()) {
          if (req_.format == ToolFormat::Mistral && calls_ > 0) {  // a later call of the list: dropped to its ']'
            state_ = State::Skip;
            break;
          }
          return hold(marked ? call_at_ : 0);
        }
        out.push_back({ToolStreamEvent::CallStart, "", calls_++, new_tool_call_id(), name});
        call_at_ = skip_ws(buf_, pos_);  // the call object's '{'
        args_at_ = args_sent_ = p;
        state_ = State::Arguments;
        break;
      }
      case State::Arguments: {
        const size_t end = json_end(buf_, args_at_);
        const size_t upto = end == std::string::npos ? buf_.size() : end;
        if (upto > args_sent_)
          out.push_back(args_event(buf_.substr(args_sent_, upto - args_sent_), calls_ - 1));
        args_sent_ = upto;
        if (end == std::string::npos) return;
        state_ = State::Trailer;
        break;
      }
      case State::Trailer: {
        const size_t close = json_end(buf_, call_at_);
        if (close == std::string::npos) return;
        size_t p = skip_ws(buf_, close);
        if (req_.format == ToolFormat::Hermes) {
          const Read r = p == buf_.size() ? Read::More : literal(buf_, p, "</tool_call>");
          if (r == Read::More) return;
          pos_ = r == Read::Ok ? p : close;
          state_ = State::Content;
        } else if (req_.format == ToolFormat::Mistral) {  // as parse_tool_calls: commas and spaces, then a call or ']'
          p = buf_.find_first_not_of(" \n\t,", close);
          if (p == std::string::npos) return;
          pos_ = buf_[p] == ']' ? p + 1 : p;
          state_ = buf_[p] == '{' ? State::Header : buf_[p] == ']' ? State::Plain : State::Skip;
        } else {
          pos_ = close;
          state_ = State::Plain;
        }
        break;
      }
    }
  }
}

std::vector<ToolStreamEvent> ToolCallStream::finish() {
  std::vector<ToolStreamEvent> out;
  if (state_ == State::Content && pos_ < buf_.size()) {  // a marker's start that never finished
    content(buf_.substr(pos_), out);
  } else if (state_ == State::Header && !(req_.format == ToolFormat::Mistral && calls_ > 0)) {
    hold(req_.format == ToolFormat::Hermes || req_.format == ToolFormat::Mistral ? call_at_ : 0);
  } else if (state_ == State::Trailer) {  // the call's object or its closing tag never came
    content(buf_.substr(args_sent_), out);
  }
  if (state_ == State::Held) {
    ParsedReply p = parse_tool_calls(buf_.substr(held_from_), req_);
    content(p.content, out);
    for (ToolCall& c : p.calls) {
      out.push_back({ToolStreamEvent::CallStart, "", calls_, c.id, c.name});
      out.push_back(args_event(c.arguments, calls_++));
    }
  }
  state_ = State::Held;
  held_from_ = buf_.size();
  return out;
}

}  // namespace slake::server
