// The prompt of a chat completion: the messages rendered through the chat template (the model's own
// Jinja template, or --chat-template / --chat-template-file), with the generation prompt, then
// tokenized as slake-cli's first chat turn is (BOS by the vocabulary's rule, the template's own BOS
// text taken off, special-token text parsed), so the same conversation gives the same tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slake/chat_template.h"
#include "slake/tokenizer/tokenizer.h"

namespace slake::server {

class ChatPrompter {
 public:
  // The template as slake-cli chooses it; when none can be had, chat requests get `error` (400)
  // and plain completions still work. `tokenizer` must outlive this.
  ChatPrompter(const Tokenizer& tokenizer, const std::string& template_name, const std::string& template_file);

  bool ready() const { return tmpl_ != nullptr; }
  const std::string& error() const { return error_; }
  std::string describe() const { return tmpl_ ? tmpl_->describe() : "none (" + error_ + ")"; }

  // Throws slake::Error when the template is missing or raises. `tools`: OpenAI's tools as a JSON
  // array for the template ("" : none).
  // `kwargs`: more template variables (a JSON object, chat_template_kwargs). `rendered`, when
  // given, gets the text before tokenizing.
  std::vector<int32_t> tokens(const std::vector<ChatMessage>& messages, const std::string& tools = "",
                              const std::string& kwargs = "", std::string* rendered = nullptr) const;
  // The rendered prompt before tokenizing (what /apply-template answers).
  std::string text(const std::vector<ChatMessage>& messages, const std::string& tools = "", const std::string& kwargs = "") const;
  // The Jinja template's text ("" for a built-in format or none).
  const std::string& template_source() const;

 private:
  const Tokenizer& tokenizer_;
  std::unique_ptr<ChatTemplate> tmpl_;
  ChatSpecialTokens special_;
  std::string error_;
};

}  // namespace slake::server
