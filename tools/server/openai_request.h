// The request bodies of /v1/completions and /v1/chat/completions (OpenAI's fields, llama-server's
// sampling extensions top_k, min_p, repeat_penalty and grammar, and slake's kv_policy, kv_budget,
// kv_window and kv_observe), checked and turned into a GenRequest. Anything wrong is an ApiError
// naming the field; so is a field the server does not understand (OpenAI's API answers an
// unrecognized argument with a 400 too).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "chat_prompt.h"
#include "slake/kv/kv_policy.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"
#include "task.h"
#include "reasoning.h"
#include "tool_calls.h"

namespace slake::server {

// The most choices (`n`) one request may ask for.
constexpr int kMaxChoices = 8;

struct ApiRequest {
  bool chat = false;
  int n = 1;  // choices, each sampled with its own seed (seed + index) after one shared prefill
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool logprobs = false;       // log probabilities in the reply (chat: logprobs; completions: logprobs >= 0)
  bool return_tokens = false;  // llama-server's extension: the reply's token ids in choices[0].tokens
  std::string model;
  GenRequest gen;
  ToolRequest tools;  // chat: the tools offered, and how they may be called
  bool reasoning = false;    // chat: the reply's <think> block goes to reasoning_content
  bool think_open = false;   // the prompt opened <think>: the reply starts inside it
};

// What parsing needs from the server.
struct RequestEnv {
  std::string model_id;
  const Tokenizer& tokenizer;
  const ChatPrompter& chat;
  const ModelConfig& cfg;
  int n_ctx;
  KvPolicyParams kv_default;  // the --kv-* flags, not resolved (get_kv resolves each request's)
  // Bytes of the vocabulary's longest piece as stored (longest_piece_bytes): no token covers more
  // text, so a prompt of B bytes is at least B / this many tokens. 0: no bound before tokenizing.
  size_t max_piece_bytes = 0;
  ReasoningFormat reasoning = ReasoningFormat::Auto;  // --reasoning-format
  std::string template_kwargs = {};                   // --chat-template-kwargs (and --reasoning-budget 0), a JSON object
};

// The byte length of the longest stored token piece (an upper bound on the text one token covers:
// stored pieces are never shorter than their text, e.g. SentencePiece's 3-byte "▁" for a space).
size_t longest_piece_bytes(const Vocab& v);

// Throws ApiError (400).
ApiRequest parse_request(const std::string& body, bool chat, const RequestEnv& env);

// llama-server's /apply-template: a chat request's messages (and tools) rendered through the chat
// template, not tokenized. Throws ApiError (400).
std::string apply_template(const std::string& body, const RequestEnv& env);

// The JSON body of a request that must be an object (tokenize, detokenize); throws ApiError.
nlohmann::json parse_object(const std::string& body);

}  // namespace slake::server
