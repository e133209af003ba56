// A conversation in slake-cli: the messages so far, and for each new user message the text that
// the context has not seen yet (the render of the conversation with that message, minus the render
// of the conversation before it, as llama.cpp's common_chat_format_single), so the context is kept
// between turns.
#pragma once
#include <string>
#include <vector>

#include "slake/chat_template.h"
#include "slake/tokenizer.h"

namespace slake::cli {

// The format to use: the one named by --chat-template, else the model's own template recognised.
// Throws slake::Error when the model has none or one that is not known, naming --chat-template.
ChatFormat choose_chat_format(const std::string& name, const Vocab& vocab);

class ChatSession {
 public:
  // `tokenizer` must outlive the session.
  ChatSession(ChatFormat format, const Tokenizer& tokenizer, const std::string& system_prompt);

  // The tokens that add a user message and open the assistant's reply. The first turn starts the
  // context: BOS as the vocabulary's add_bos rule says (the template's own BOS text is taken off
  // so it is not there twice); later turns add no BOS of their own.
  std::vector<int32_t> user_turn(const std::string& text);
  // Records the assistant's reply, so that the next turn renders the conversation with it.
  void assistant_reply(const std::string& text);

  // The text of the last user_turn (what was tokenized), for tests and the echo.
  const std::string& last_turn_text() const { return last_text_; }

 private:
  ChatFormat format_;
  const Tokenizer& tokenizer_;
  ChatSpecialTokens special_;
  std::vector<ChatMessage> messages_;
  bool started_ = false;
  std::string last_text_;
};

}  // namespace slake::cli
