// The built-in chat formats of chat_template.h (the first three transcribe their official Jinja
// templates, the others follow llama.cpp's llm_chat_apply_template), and ChatTemplate.
#include "slake/chat_template.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "slake/error.h"
#include "slake/jinja.h"

namespace slake {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Python's str.strip() and Jinja's |trim, for ASCII whitespace (the templates' own separators).
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

struct Turns {
  const std::string* system = nullptr;  // the leading system message, if any
  std::vector<const ChatMessage*> rest;
};

// The optional system message first, then user/assistant alternating from a user turn: the
// check that the Llama 2 and Mistral templates make with raise_exception.
Turns alternating_turns(ChatFormat f, const std::vector<ChatMessage>& messages) {
  Turns t;
  size_t i = 0;
  if (!messages.empty() && messages[0].role == "system") t.system = &messages[i++].content;
  for (size_t k = 0; i < messages.size(); ++i, ++k) {
    const std::string& want = k % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != want)
      fail(std::string(chat_format_name(f)) + " chat template: message " + std::to_string(i + 1) + " has role '" +
           messages[i].role + "' where '" + want +
           "' is expected (an optional system message first, then user and assistant alternating)");
    t.rest.push_back(&messages[i]);
  }
  return t;
}

// meta-llama/Llama-2-7b-chat-hf:
//   user:      bos_token + '[INST] ' + content.strip() + ' [/INST]'
//   assistant: ' ' + content.strip() + ' ' + eos_token
//   the first user content is '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content when a system message leads.
std::string render_llama2(const std::vector<ChatMessage>& messages, const ChatSpecialTokens& sp) {
  const Turns t = alternating_turns(ChatFormat::Llama2, messages);
  std::string out;
  for (size_t k = 0; k < t.rest.size(); ++k) {
    std::string content = t.rest[k]->content;
    if (k == 0 && t.system) content = "<<SYS>>\n" + *t.system + "\n<</SYS>>\n\n" + content;
    if (k % 2 == 0) out += sp.bos + "[INST] " + strip(content) + " [/INST]";
    else out += " " + strip(content) + " " + sp.eos;
  }
  return out;
}

// meta-llama/Meta-Llama-3-8B-Instruct:
//   every message: '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>',
//   bos_token before the first; add_generation_prompt: '<|start_header_id|>assistant<|end_header_id|>\n\n'.
std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const ChatSpecialTokens& sp) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += sp.bos;
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
    out += strip(messages[i].content) + "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// mistralai/Mistral-7B-Instruct-v0.3 (without tools):
//   bos_token, then user: '[INST] ' + content + '[/INST]' (with system + '\n\n' before the content
//   of one user message: here the first, see chat_template.h); assistant: ' ' + content|trim + eos_token.
std::string render_mistral(const std::vector<ChatMessage>& messages, const ChatSpecialTokens& sp) {
  const Turns t = alternating_turns(ChatFormat::Mistral, messages);
  std::string out = sp.bos;
  for (size_t k = 0; k < t.rest.size(); ++k) {
    if (k % 2 == 0) {
      out += "[INST] ";
      if (k == 0 && t.system) out += *t.system + "\n\n";
      out += t.rest[k]->content + "[/INST]";
    } else {
      out += " " + strip(t.rest[k]->content) + sp.eos;
    }
  }
  return out;
}


// llama.cpp's v1, v3-Tekken: "[INST]" opens each user turn (v1 with a space before it and before
// "[/INST]", Tekken with none after it); the system message opens the first turn.
std::string render_mistral_family(ChatFormat f, const std::vector<ChatMessage>& messages) {
  const std::string lead = f == ChatFormat::MistralV1 ? " " : "";
  const std::string trail = f == ChatFormat::MistralV3Tekken ? "" : " ";
  std::string out;
  bool inside_turn = false;
  for (const ChatMessage& m : messages) {
    if (!inside_turn) out += lead + "[INST]" + trail, inside_turn = true;
    if (m.role == "system") out += m.content + "\n\n";
    else if (m.role == "user") out += m.content + lead + "[/INST]";
    else out += trail + m.content + "</s>", inside_turn = false;
  }
  return out;
}

// google/gemma-7b-it as llama.cpp builds it: no system turn (a system message opens the next user
// turn, followed by a blank line), "model" for the assistant, every content trimmed. The official
// template has bos_token before this; the tokenizer adds it here.
std::string render_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out, system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += strip(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n";
    if (!system.empty() && role != "model") out += system + "\n\n", system.clear();
    out += strip(m.content) + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

std::string render_simple(ChatFormat f, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string& r = m.role;
    const std::string& c = m.content;
    switch (f) {
      case ChatFormat::MistralV7:
        if (r == "system") out += "[SYSTEM_PROMPT] " + c + "[/SYSTEM_PROMPT]";
        else if (r == "user") out += "[INST] " + c + "[/INST]";
        else out += " " + c + "</s>";
        break;
      case ChatFormat::ChatML: out += "<|im_start|>" + r + "\n" + c + "<|im_end|>\n"; break;
      case ChatFormat::Zephyr: out += "<|" + r + "|>\n" + c + "<|endoftext|>\n"; break;
      case ChatFormat::Falcon3: out += "<|" + r + "|>\n" + c + "\n"; break;
      case ChatFormat::Vicuna:
        if (r == "system") out += c + "\n\n";
        else if (r == "user") out += "USER: " + c + "\n";
        else if (r == "assistant") out += "ASSISTANT: " + c + "</s>\n";
        break;
      case ChatFormat::DeepSeek:
        if (r == "system") out += c;
        else if (r == "user") out += "### Instruction:\n" + c + "\n";
        else if (r == "assistant") out += "### Response:\n" + c + "\n<|EOT|>\n";
        break;
      case ChatFormat::Alpaca:
        if (r == "system") out += c + "\n\n";
        else if (r == "user") out += "### Instruction:\n" + c + "\n\n";
        else if (r == "assistant") out += "### Response:\n" + c + "\n\n";
        break;
      default: fail("not a simple chat format");
    }
  }
  if (add_generation_prompt) {
    switch (f) {
      case ChatFormat::ChatML: out += "<|im_start|>assistant\n"; break;
      case ChatFormat::Zephyr:
      case ChatFormat::Falcon3: out += "<|assistant|>\n"; break;
      case ChatFormat::Vicuna: out += "ASSISTANT:"; break;
      case ChatFormat::DeepSeek:
      case ChatFormat::Alpaca: out += "### Response:\n"; break;
      default: break;
    }
  }
  return out;
}

const ChatFormat kAllFormats[] = {ChatFormat::Llama2,    ChatFormat::Llama3,          ChatFormat::Mistral,
                                  ChatFormat::MistralV1, ChatFormat::MistralV3Tekken, ChatFormat::MistralV7,
                                  ChatFormat::ChatML,    ChatFormat::Zephyr,          ChatFormat::Vicuna,
                                  ChatFormat::DeepSeek,  ChatFormat::Falcon3,         ChatFormat::Alpaca,
                                  ChatFormat::Gemma};

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Llama2: return "llama2";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Mistral: return "mistral-v3";
    case ChatFormat::MistralV1: return "mistral-v1";
    case ChatFormat::MistralV3Tekken: return "mistral-v3-tekken";
    case ChatFormat::MistralV7: return "mistral-v7";
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Zephyr: return "zephyr";
    case ChatFormat::Vicuna: return "vicuna";
    case ChatFormat::DeepSeek: return "deepseek";
    case ChatFormat::Falcon3: return "falcon3";
    case ChatFormat::Alpaca: return "alpaca";
    case ChatFormat::Gemma: return "gemma";
  }
  return "?";
}

std::string chat_format_names() {
  std::string out;
  for (ChatFormat f : kAllFormats) out += (out.empty() ? "" : ", ") + std::string(chat_format_name(f));
  return out;
}

ChatFormat chat_format_from_name(const std::string& name) {
  for (ChatFormat f : kAllFormats)
    if (name == chat_format_name(f)) return f;
  if (name == "mistral") return ChatFormat::Mistral;
  fail("unknown chat template '" + name + "' (known: " + chat_format_names() + ")");
}

// The order of llama.cpp's llm_chat_detect_template, for the formats slake has.
bool detect_chat_format(const std::string& t, ChatFormat& out) {
  for (ChatFormat f : kAllFormats)
    if (t == chat_format_name(f)) return out = f, true;
  if (t == "mistral") return out = ChatFormat::Mistral, true;
  if (contains(t, "<|im_start|>")) {
    if (contains(t, "<|im_sep|>")) return false;  // Phi 4
    return out = ChatFormat::ChatML, true;
  }
  if (t.rfind("mistral", 0) == 0 || contains(t, "[INST]")) {
    if (contains(t, "[SYSTEM_PROMPT]")) return out = ChatFormat::MistralV7, true;
    if (contains(t, "[AVAILABLE_TOOLS]") || contains(t, "' [INST] ' + system_message")) {
      if (contains(t, " [INST]")) return out = ChatFormat::MistralV1, true;
      if (contains(t, "\"[INST]\"")) return out = ChatFormat::MistralV3Tekken, true;
      return out = ChatFormat::Mistral, true;
    }
    // Llama 2 and the templates derived from it; only those with a system block are Llama 2's own.
    if (contains(t, "<<SYS>>")) return out = ChatFormat::Llama2, true;
    return false;
  }
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return false;  // Phi 3
  if (contains(t, "<|assistant|>") && contains(t, "<|user|>")) {
    if (contains(t, "</s>")) return out = ChatFormat::Falcon3, true;
    return false;  // GLM-Edge
  }
  if (contains(t, "<|user|>") && contains(t, "<|endoftext|>")) return out = ChatFormat::Zephyr, true;
  if (contains(t, "USER: ") && contains(t, "ASSISTANT: ")) {
    if (contains(t, "SYSTEM: ")) return false;  // Vicuna-Orca
    return out = ChatFormat::Vicuna, true;
  }
  if (contains(t, "### Instruction:") && contains(t, "<|EOT|>")) return out = ChatFormat::DeepSeek, true;
  if (contains(t, "<|START_OF_TURN_TOKEN|>") && contains(t, "<|USER_TOKEN|>")) return false;  // Command R
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return out = ChatFormat::Llama3, true;
  if (contains(t, "### Instruction:") && contains(t, "### Response:")) return out = ChatFormat::Alpaca, true;
  return false;
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const ChatSpecialTokens& special) {
  switch (format) {
    case ChatFormat::Llama2: return render_llama2(messages, special);
    case ChatFormat::Llama3: return render_llama3(messages, add_generation_prompt, special);
    case ChatFormat::Mistral: return render_mistral(messages, special);
    case ChatFormat::MistralV1:
    case ChatFormat::MistralV3Tekken: return render_mistral_family(format, messages);
    case ChatFormat::Gemma: return render_gemma(messages, add_generation_prompt);
    default: return render_simple(format, messages, add_generation_prompt);
  }
}

struct ChatTemplate::Jinja {
  jinja::Template t;
  std::string source;
};

ChatTemplate ChatTemplate::builtin(ChatFormat format) {
  ChatTemplate c;
  c.format_ = format;
  return c;
}

ChatTemplate ChatTemplate::jinja(const std::string& source, const std::string& name) {
  ChatTemplate c;
  c.jinja_ = std::make_unique<Jinja>(Jinja{jinja::Template(source, name), source});
  return c;
}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const ChatSpecialTokens& special, const std::string& tools,
                                 const std::string& kwargs) const {
  if (!jinja_) {
    if (!kwargs.empty() && kwargs != "{}")
      fail(std::string("the built-in chat format ") + chat_format_name(format_) + " takes no template variables");
    const bool tool_use = !tools.empty() || std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
                            return !m.tool_calls.empty() || m.role == "tool";
                          });
    if (tool_use)
      fail(std::string("the built-in chat format ") + chat_format_name(format_) +
           " has no tools or tool messages; give a Jinja template that takes them");
    return render_chat(format_, messages, add_generation_prompt, special);
  }
  // What transformers' apply_chat_template passes (tools and documents as None when not given).
  using ojson = nlohmann::ordered_json;
  ojson ctx;
  ctx["messages"] = ojson::array();
  for (const ChatMessage& m : messages) {
    ojson msg = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) msg["tool_calls"] = ojson::parse(m.tool_calls);
    if (!m.tool_call_id.empty()) msg["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) msg["name"] = m.name;
    ctx["messages"].push_back(std::move(msg));
  }
  ctx["tools"] = tools.empty() ? ojson() : ojson::parse(tools);
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = special.bos;
  ctx["eos_token"] = special.eos;
  if (!kwargs.empty()) {
    const ojson extra = ojson::parse(kwargs);  // named: items() of a temporary would dangle
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
  }
  return jinja_->t.render(ctx.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

const std::string& ChatTemplate::source() const {
  static const std::string kNone;
  return jinja_ ? jinja_->source : kNone;
}

std::string ChatTemplate::describe() const {
  return jinja_ ? jinja_->t.name() + " (Jinja)" : std::string(chat_format_name(format_)) + " (built-in)";
}

}  // namespace slake
