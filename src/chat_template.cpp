// The three chat formats of chat_template.h, each a transcription of its official Jinja template.
#include "slake/chat_template.h"

#include "slake/error.h"

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

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Llama2: return "llama2";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Mistral: return "mistral";
  }
  return "?";
}

std::string chat_format_names() { return "llama2, llama3, mistral"; }

ChatFormat chat_format_from_name(const std::string& name) {
  for (ChatFormat f : {ChatFormat::Llama2, ChatFormat::Llama3, ChatFormat::Mistral})
    if (name == chat_format_name(f)) return f;
  if (name == "mistral-v3") return ChatFormat::Mistral;
  fail("unknown chat template '" + name + "' (known: " + chat_format_names() + ")");
}

bool detect_chat_format(const std::string& t, ChatFormat& out) {
  for (ChatFormat f : {ChatFormat::Llama2, ChatFormat::Llama3, ChatFormat::Mistral})
    if (t == chat_format_name(f)) return out = f, true;
  if (t == "mistral-v3") return out = ChatFormat::Mistral, true;
  if (contains(t, "<|im_start|>")) return false;  // ChatML, even when it mentions [INST]
  if (t.rfind("mistral", 0) == 0 || contains(t, "[INST]")) {
    if (contains(t, "[SYSTEM_PROMPT]")) return false;  // Mistral v7
    if (contains(t, "[AVAILABLE_TOOLS]") || contains(t, "' [INST] ' + system_message")) {
      // Mistral's official v1 (" [INST]"), v3 and v3-Tekken ("[INST]" with no space after it).
      if (contains(t, " [INST]") || contains(t, "\"[INST]\"")) return false;
      return out = ChatFormat::Mistral, true;
    }
    // Llama 2 and the templates derived from it; only those with a system block are Llama 2's own.
    if (contains(t, "<<SYS>>")) return out = ChatFormat::Llama2, true;
    return false;
  }
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return out = ChatFormat::Llama3, true;
  return false;
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const ChatSpecialTokens& special) {
  switch (format) {
    case ChatFormat::Llama2: return render_llama2(messages, special);
    case ChatFormat::Llama3: return render_llama3(messages, add_generation_prompt, special);
    case ChatFormat::Mistral: return render_mistral(messages, special);
  }
  fail("unknown chat format");
}

}  // namespace slake
