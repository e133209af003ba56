#include "openai_response.h"

namespace slake::server {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

ResponseBuilder::ResponseBuilder(const ApiRequest& req, const Tokenizer& tokenizer, std::string id, long long created)
    : req_(req), tokenizer_(tokenizer), id_(std::move(id)), created_(created) {}

json ResponseBuilder::base(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", req_.model}, {"system_fingerprint", "slake"}};
}

json ResponseBuilder::usage(const std::vector<const Task*>& done) const {
  // n > 1 choices: the prompt once (its prefill was shared), every choice's tokens.
  int gen = 0;
  for (const Task* t : done) gen += t->n_gen();
  const Task& first = *done.front();
  return {{"prompt_tokens", first.n_prompt()},
          {"completion_tokens", gen},
          {"total_tokens", first.n_prompt() + gen},
          {"prompt_tokens_details", {{"cached_tokens", first.n_cached()}}}};
}

json ResponseBuilder::logprobs(const std::vector<TokenLogprob>& tokens, size_t text_offset) const {
  auto text = [&](int32_t id) { return tokenizer_.token_to_piece(id); };
  if (req_.chat) {
    json content = json::array();
    for (const TokenLogprob& t : tokens) {
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        std::vector<int> b;
        for (unsigned char c : text(id)) b.push_back(c);
        top.push_back({{"token", text(id)}, {"logprob", lp}, {"bytes", b}});
      }
      std::vector<int> b;
      for (unsigned char c : text(t.id)) b.push_back(c);
      content.push_back({{"token", text(t.id)}, {"logprob", t.logprob}, {"bytes", b}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const TokenLogprob& t : tokens) {
    toks.push_back(text(t.id));
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[text(id)] = lp;
    tops.push_back(top);
    offs.push_back(text_offset);
    text_offset += text(t.id).size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json ResponseBuilder::full(const std::vector<Piece>& pieces, const Task& done) const {
  return full(std::vector<Choice>{{&pieces, &done}});
}

json ResponseBuilder::full(const std::vector<Choice>& choices) const {
  json r = base(req_.chat ? "chat.completion" : "text_completion");
  r["choices"] = json::array();
  std::vector<const Task*> tasks;
  for (size_t i = 0; i < choices.size(); ++i) {
    r["choices"].push_back(choice(*choices[i].pieces, *choices[i].task, static_cast<int>(i)));
    tasks.push_back(choices[i].task);
  }
  r["usage"] = usage(tasks);
  return r;
}

json ResponseBuilder::choice(const std::vector<Piece>& pieces, const Task& done, int index) const {
  std::string text;
  std::vector<TokenLogprob> lps;
  std::vector<int32_t> ids;
  for (const Piece& p : pieces) {
    text += p.text;
    ids.insert(ids.end(), p.ids.begin(), p.ids.end());
    lps.insert(lps.end(), p.tokens.begin(), p.tokens.end());
  }
  json lp = req_.logprobs ? logprobs(lps, 0) : json();
  json c;
  if (req_.chat) {
    std::string answer = text, reasoning;
    if (req_.reasoning) {
      ReasoningSplitter split(req_.think_open);
      const auto [r, c] = split.push(text);
      const auto [r2, c2] = split.flush();
      reasoning = r + r2;
      answer = c + c2;
    }
    json message = {{"role", "assistant"}, {"content", answer}};
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    std::string finish = done.finish_reason();
    if (req_.tools.active()) {
      // The content outside the calls, trimmed (as a stream gives it); null beside calls when empty.
      const ParsedReply p = parse_tool_calls(answer, req_.tools);
      message["content"] = p.calls.empty() || !p.content.empty() ? json(p.content) : json();
      if (!p.calls.empty()) {
        message["tool_calls"] = json::array();
        for (const ToolCall& c : p.calls)
          message["tool_calls"].push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        if (finish != "length") finish = "tool_calls";  // a reply cut short says so
      }
    }
    c = {{"index", index}, {"message", message}, {"logprobs", lp}, {"finish_reason", finish}};
  } else {
    c = {{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", done.finish_reason()}};
  }
  if (req_.return_tokens) c["tokens"] = ids;
  return c;
}

json ResponseBuilder::first_chunk(int index) const {
  json r = base("chat.completion.chunk");
  r["choices"] = json::array(
      {{{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return r;
}

json ResponseBuilder::piece_chunk(const Piece& p, int index) const {
  json lp = req_.logprobs ? logprobs(p.tokens, 0) : json();
  json r = base(req_.chat ? "chat.completion.chunk" : "text_completion");
  if (req_.chat)
    r["choices"] = json::array({{{"index", index}, {"delta", {{"content", p.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}}});
  else
    r["choices"] = json::array({{{"index", index}, {"text", p.text}, {"logprobs", lp}, {"finish_reason", nullptr}}});
  if (req_.return_tokens) r["choices"][0]["tokens"] = p.ids;
  return r;
}

json ResponseBuilder::reasoning_chunk(const std::string& text, int index) const {
  json r = base("chat.completion.chunk");
  r["choices"] = json::array({{{"index", index}, {"delta", {{"reasoning_content", text}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return r;
}

json ResponseBuilder::final_chunk(const std::string& finish_reason, int index) const {
  json r = base(req_.chat ? "chat.completion.chunk" : "text_completion");
  if (req_.chat)
    r["choices"] = json::array({{{"index", index}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}});
  else
    r["choices"] = json::array({{{"index", index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}});
  return r;
}

json ResponseBuilder::tool_chunk(const ToolStreamEvent& e, int index) const {
  json delta;
  if (e.kind == ToolStreamEvent::Content)
    delta = {{"content", e.text}};
  else if (e.kind == ToolStreamEvent::CallStart)  // as OpenAI streams a call: its id and name, then its arguments
    delta = {{"tool_calls", json::array({{{"index", e.index}, {"id", e.id}, {"type", "function"},
                                          {"function", {{"name", e.name}, {"arguments", ""}}}}})}};
  else
    delta = {{"tool_calls", json::array({{{"index", e.index}, {"function", {{"arguments", e.text}}}}})}};
  json r = base("chat.completion.chunk");
  r["choices"] = json::array({{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return r;
}

json ResponseBuilder::usage_chunk(const std::vector<const Task*>& done) const {
  json r = base(req_.chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = usage(done);
  return r;
}

}  // namespace slake::server
