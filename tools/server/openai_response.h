// OpenAI's response objects: chat.completion and text_completion bodies, their streamed chunks
// (chat.completion.chunk; text_completion again for completions), usage and log probabilities.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "openai_request.h"
#include "slake/tokenizer/tokenizer.h"
#include "task.h"

namespace slake::server {

class ResponseBuilder {
 public:
  // `id` is the response's id ("chatcmpl-7", "cmpl-7").
  ResponseBuilder(const ApiRequest& req, const Tokenizer& tokenizer, std::string id, long long created);

  // The whole reply, when not streamed: one choice, or several (n > 1: choice i is pieces[i] of
  // task[i]; the usage counts the prompt once and every choice's tokens).
  struct Choice {
    const std::vector<Piece>* pieces;
    const Task* task;
  };
  nlohmann::json full(const std::vector<Piece>& pieces, const Task& done) const;
  nlohmann::json full(const std::vector<Choice>& choices) const;
  // Streamed: the first chunk (chat: the assistant role), one per piece, the last (finish_reason),
  // and the usage chunk (stream_options.include_usage); `index` is the choice's.
  nlohmann::json first_chunk(int index = 0) const;
  nlohmann::json piece_chunk(const Piece& p, int index = 0) const;
  nlohmann::json final_chunk(const std::string& finish_reason, int index = 0) const;
  // Chat, streamed: a delta of the reasoning (reasoning_content).
  nlohmann::json reasoning_chunk(const std::string& text, int index = 0) const;
  nlohmann::json usage_chunk(const std::vector<const Task*>& done) const;
  // Streamed with tools: what the reply's ToolCallStream gives (content, a call's id and name, a
  // part of its arguments) as a chunk.
  nlohmann::json tool_chunk(const ToolStreamEvent& e, int index = 0) const;

 private:
  nlohmann::json base(const char* object) const;
  nlohmann::json usage(const std::vector<const Task*>& done) const;
  nlohmann::json choice(const std::vector<Piece>& pieces, const Task& done, int index) const;
  nlohmann::json logprobs(const std::vector<TokenLogprob>& tokens, size_t text_offset) const;

  const ApiRequest& req_;
  const Tokenizer& tokenizer_;
  std::string id_;
  long long created_;
};

// One server-sent event: "data: <json>\n\n".
std::string sse(const nlohmann::json& j);
// JSON text with invalid UTF-8 (a token that is part of a character) replaced by U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace slake::server
