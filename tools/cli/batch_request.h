// One request of slake-cli's batch mode (--batch FILE): a JSON object on one line of the input,
// answered by one JSON line of output. The fields, all optional except "prompt":
//   "id"               anything; given back as is in the response (null when absent)
//   "prompt"           the text, tokenized with the model's tokenizer (BOS as the vocabulary says,
//                      special-token text parsed, as a plain -p prompt)
//   "max_new_tokens"   tokens to generate at most (default: -n; -1: until end of text or a full context)
//   "min_new_tokens"   the end-of-text and stop tokens cannot end the reply before this many (default 0)
//   "chat"             true: the (truncated) prompt becomes a user message of the chat template
//   "stop"             strings whose last token ends the reply (that token's text is kept), as a
//                      Hugging Face eos_token_id list built from tokenizer.encode(s)[-1]
//   "truncate_tokens"  M: a prompt of more than M tokens (BOS included) keeps its first M/2 and last
//                      M/2 tokens, each half decoded to text without special tokens and the two
//                      texts joined, before the chat template (0: never truncate)
//   "echo_prompt"      true: the response has "prompt_text", the text that was finally tokenized
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace slake::cli {

struct BatchRequest {
  nlohmann::json id;  // null when absent
  std::string prompt;
  int max_new_tokens = -1;
  int min_new_tokens = 0;
  bool chat = false;
  std::vector<std::string> stop;
  int truncate_tokens = 0;
  bool echo_prompt = false;
};

// Reads a request; a missing or mistyped field, an unknown field or a prompt that is not valid
// UTF-8 throws slake::Error naming the field. `default_max_new_tokens` is -n.
BatchRequest parse_batch_request(const nlohmann::json& j, int default_max_new_tokens);

}  // namespace slake::cli
