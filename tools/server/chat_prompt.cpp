#include "chat_prompt.h"

#include "slake/error.h"
#include "slake/format/mapped_file.h"

namespace slake::server {

namespace {

std::string piece_or_empty(const Vocab& v, int id) {
  return id >= 0 && static_cast<size_t>(id) < v.tokens.size() ? v.tokens[static_cast<size_t>(id)] : std::string();
}

// As slake-cli's choose_chat_template: a file, a built-in name, or the model's own Jinja template
// (falling back to the built-in format it resembles when it cannot render).
ChatTemplate choose(const Vocab& v, const std::string& name, const std::string& file) {
  if (!file.empty()) return ChatTemplate::jinja(read_text_file(file), file);
  // A Jinja source given inline (llama-server takes a template string as well as a name).
  if (name.find("{%") != std::string::npos || name.find("{{") != std::string::npos)
    return ChatTemplate::jinja(name, "--chat-template");
  if (!name.empty()) return ChatTemplate::builtin(chat_format_from_name(name));
  // As llama-server: a model without a template chats in ChatML.
  if (v.chat_template.empty()) return ChatTemplate::builtin(ChatFormat::ChatML);
  try {
    ChatTemplate t = ChatTemplate::jinja(v.chat_template, "the model's chat template");
    t.render({{"user", "Hello"}}, true, {});
    return t;
  } catch (const Error& e) {
    ChatFormat f;
    if (!detect_chat_format(v.chat_template, f)) throw;
    return ChatTemplate::builtin(f);
  }
}

}  // namespace

ChatPrompter::ChatPrompter(const Tokenizer& tokenizer, const std::string& template_name, const std::string& template_file)
    : tokenizer_(tokenizer) {
  const Vocab& v = tokenizer.vocab();
  special_ = {piece_or_empty(v, v.bos), piece_or_empty(v, v.eos)};
  try {
    tmpl_ = std::make_unique<ChatTemplate>(choose(v, template_name, template_file));
  } catch (const Error& e) {
    if (!template_file.empty() || !template_name.empty()) throw;  // a flag that does not work is fatal
    error_ = e.what();
  }
}

const std::string& ChatPrompter::template_source() const {
  static const std::string kNone;
  return tmpl_ ? tmpl_->source() : kNone;
}

std::string ChatPrompter::text(const std::vector<ChatMessage>& messages, const std::string& tools,
                               const std::string& kwargs) const {
  if (!tmpl_) fail(error_);
  return tmpl_->render(messages, true, special_, tools, kwargs);
}

std::vector<int32_t> ChatPrompter::tokens(const std::vector<ChatMessage>& messages, const std::string& tools,
                                          const std::string& kwargs, std::string* rendered) const {
  std::string text = this->text(messages, tools, kwargs);
  if (rendered) *rendered = text;
  const bool add_bos = tokenizer_.vocab().add_bos;
  if (add_bos && !special_.bos.empty() && text.compare(0, special_.bos.size(), special_.bos) == 0)
    text.erase(0, special_.bos.size());
  return tokenizer_.tokenize(text, add_bos, /*parse_special=*/true);
}

}  // namespace slake::server
