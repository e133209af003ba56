#include "chat_session.h"

#include "slake/error.h"

namespace slake::cli {

namespace {

std::string piece_or_empty(const Vocab& v, int id) {
  return id >= 0 && static_cast<size_t>(id) < v.tokens.size() ? v.tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

ChatFormat choose_chat_format(const std::string& name, const Vocab& vocab) {
  if (!name.empty()) return chat_format_from_name(name);
  if (vocab.chat_template.empty())
    fail("the model has no chat template; choose one with --chat-template NAME (known: " + chat_format_names() + ")");
  ChatFormat f;
  if (!detect_chat_format(vocab.chat_template, f))
    fail("the model's chat template is not one slake knows; choose one with --chat-template NAME (known: " +
         chat_format_names() + ")");
  return f;
}

ChatSession::ChatSession(ChatFormat format, const Tokenizer& tokenizer, const std::string& system_prompt)
    : format_(format), tokenizer_(tokenizer) {
  const Vocab& v = tokenizer.vocab();
  special_ = {piece_or_empty(v, v.bos), piece_or_empty(v, v.eos)};
  if (!system_prompt.empty()) messages_.push_back({"system", system_prompt});
}

std::vector<int32_t> ChatSession::user_turn(const std::string& text) {
  const std::string before = started_ ? render_chat(format_, messages_, false, special_) : std::string();
  messages_.push_back({"user", text});
  const std::string after = render_chat(format_, messages_, true, special_);
  // The formats are built so that this holds (chat_template.h); a failure here is a bug.
  if (after.compare(0, before.size(), before) != 0)
    fail(std::string(chat_format_name(format_)) + " chat template: the conversation's render changed between turns");
  last_text_ = after.substr(before.size());

  bool add_bos = false;
  std::string text_to_tokenize = last_text_;
  if (!started_ && tokenizer_.vocab().add_bos) {
    add_bos = true;
    if (!special_.bos.empty() && text_to_tokenize.compare(0, special_.bos.size(), special_.bos) == 0)
      text_to_tokenize.erase(0, special_.bos.size());
  }
  started_ = true;
  return tokenizer_.tokenize(text_to_tokenize, add_bos, /*parse_special=*/true);
}

void ChatSession::assistant_reply(const std::string& text) { messages_.push_back({"assistant", text}); }

}  // namespace slake::cli
