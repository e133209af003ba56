// A thinking model's reply split into its reasoning and its answer, as llama-server's
// --reasoning-format deepseek splits it: the text between <think> and </think> (DeepSeek-R1
// distills, Qwen3, QwQ) goes to reasoning_content, the rest to content. A template whose
// generation prompt already opens <think> (the R1 distills') starts the reply inside it.
#pragma once
#include <string>
#include <utility>

namespace slake::server {

enum class ReasoningFormat { None, DeepSeek, Auto /* DeepSeek when the template mentions <think> */ };

// "none", "deepseek", "auto"; throws slake::Error for another name.
ReasoningFormat reasoning_format_from_name(const std::string& name);

// Streamed text in, final reasoning and content out: text that may still turn out to be part of
// a tag is held back until it is known.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_inside) : state_(starts_inside ? State::Inside : State::Before) {}
  // The reasoning and the content that `text` completes.
  std::pair<std::string, std::string> push(const std::string& text);
  // What was held back, at the end of the reply (an unclosed <think> is all reasoning).
  std::pair<std::string, std::string> flush();

 private:
  enum class State { Before, Inside, After };
  State state_;
  bool skip_newlines_ = false;  // just after </think>
  std::string held_;
};

// Whether a rendered prompt leaves the reply inside a <think> block it opened.
bool prompt_opens_thinking(const std::string& prompt);

}  // namespace slake::server
