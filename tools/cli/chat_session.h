// A conversation in slake-cli: the messages so far, and for each new user message the text that
// the context has not seen yet (the render of the conversation with that message, minus the render
// of the conversation before it, as llama.cpp's common_chat_format_single), so the context is kept
// between turns.
#pragma once
#include <string>
#include <vector>

#include "slake/chat_template.h"
#include "slake/tokenizer/tokenizer.h"
#include "cli_options.h"

namespace slake::cli {

// The template to use: --chat-template-file (Jinja), else --chat-template NAME (built-in), else the
// model's own template rendered as Jinja; when that fails to parse or render a one-message chat,
// the built-in format recognised from its text (unless --jinja insists on the Jinja one). Throws
// slake::Error when nothing fits, naming the flags. `note` gets a line to show when it fell back.
ChatTemplate choose_chat_template(const CliOptions& o, const Vocab& vocab, std::string* note = nullptr);

class ChatSession {
 public:
  // `tokenizer` must outlive the session.
  ChatSession(ChatTemplate tmpl, const Tokenizer& tokenizer, const std::string& system_prompt);

  // The tokens that add a user message and open the assistant's reply. The first turn starts the
  // context: BOS as the vocabulary's add_bos rule says (the template's own BOS text is taken off
  // so it is not there twice); later turns add no BOS of their own.
  std::vector<int32_t> user_turn(const std::string& text);
  // Records the assistant's reply, so that the next turn renders the conversation with it.
  void assistant_reply(const std::string& text);
  // A new conversation (the system prompt stays); the next user_turn starts the context again.
  void clear();
  // Takes the last user message and the reply to it off the conversation and returns the message,
  // so that user_turn(it) on an emptied context asks it again after the rest, rendered whole.
  // Throws slake::Error when no message was answered yet.
  std::string rewind();

  // The text of the last user_turn (what was tokenized), for tests and the echo.
  const std::string& last_turn_text() const { return last_text_; }
  // Set when the last turn's render did not extend the previous one (see user_turn).
  const std::string& last_warning() const { return warning_; }

 private:
  ChatTemplate tmpl_;
  const Tokenizer& tokenizer_;
  ChatSpecialTokens special_;
  std::vector<ChatMessage> messages_;
  bool started_ = false;
  std::string last_text_;
  std::string warning_;
};

}  // namespace slake::cli
