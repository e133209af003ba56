#include "chat_session.h"

#include "slake/error.h"
#include "slake/format/mapped_file.h"

namespace slake::cli {

namespace {

std::string piece_or_empty(const Vocab& v, int id) {
  return id >= 0 && static_cast<size_t>(id) < v.tokens.size() ? v.tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

ChatTemplate choose_chat_template(const CliOptions& o, const Vocab& vocab, std::string* note) {
  if (!o.chat_template_file.empty()) return ChatTemplate::jinja(read_text_file(o.chat_template_file), o.chat_template_file);
  if (!o.chat_template.empty()) return ChatTemplate::builtin(chat_format_from_name(o.chat_template));
  if (vocab.chat_template.empty())
    fail("the model has no chat template; choose one with --chat-template NAME (known: " + chat_format_names() +
         ") or --chat-template-file FILE");
  std::string why;
  try {
    ChatTemplate t = ChatTemplate::jinja(vocab.chat_template, "the model's chat template");
    t.render({{"user", "Hello"}}, true, {});  // a template that cannot render this cannot chat
    return t;
  } catch (const Error& e) {
    if (o.jinja) throw;
    why = e.what();
  }
  ChatFormat f;
  if (!detect_chat_format(vocab.chat_template, f))
    fail(why + "; and it is not a format slake has built in: choose one with --chat-template NAME (known: " +
         chat_format_names() + ") or --chat-template-file FILE");
  if (note) *note = why + "; using the built-in " + chat_format_name(f) + " format it resembles";
  return ChatTemplate::builtin(f);
}

ChatSession::ChatSession(ChatTemplate tmpl, const Tokenizer& tokenizer, const std::string& system_prompt)
    : tmpl_(std::move(tmpl)), tokenizer_(tokenizer) {
  const Vocab& v = tokenizer.vocab();
  special_ = {piece_or_empty(v, v.bos), piece_or_empty(v, v.eos)};
  if (!system_prompt.empty()) messages_.push_back({"system", system_prompt});
}

std::vector<int32_t> ChatSession::user_turn(const std::string& text) {
  const std::string before = started_ ? tmpl_.render(messages_, false, special_) : std::string();
  messages_.push_back({"user", text});
  std::string after;
  try {
    after = tmpl_.render(messages_, true, special_);
  } catch (const Error&) {
    messages_.pop_back();  // the template refused this message: the conversation stays as it was
    throw;
  }
  // The built-in formats are built so that the old render is a prefix of the new one. Some Jinja
  // templates rewrite earlier turns (a date line, reasoning dropped from past replies): then, as
  // llama.cpp's common_chat_format_single does, the text past the old render's length is fed,
  // and the difference is reported, since the context then holds what the template would not.
  warning_.clear();
  if (after.compare(0, before.size(), before) != 0) {
    size_t same = 0;
    while (same < before.size() && same < after.size() && before[same] == after[same]) ++same;
    warning_ = tmpl_.describe() + " renders the earlier turns differently once this message is added (from byte " +
               std::to_string(same) + "); the context keeps the earlier text and gets only the new part";
  }
  last_text_ = after.size() > before.size() ? after.substr(before.size()) : std::string();

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

void ChatSession::clear() {
  while (!messages_.empty() && messages_.back().role != "system") messages_.pop_back();
  started_ = false;
}

std::string ChatSession::rewind() {
  if (messages_.size() < 2 || messages_.back().role != "assistant" || messages_[messages_.size() - 2].role != "user")
    fail("no answered message to ask again");
  messages_.pop_back();
  std::string text = messages_.back().content;
  messages_.pop_back();
  started_ = false;
  return text;
}

}  // namespace slake::cli
