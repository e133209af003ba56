// Chat templates: a conversation (system, user and assistant messages) as the one prompt string
// that an instruction-tuned model was trained on. Three formats, written out in C++ from the
// official Jinja templates of the models' tokenizer_config.json (no Jinja engine):
//   llama2   Llama 2 chat:   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
//   llama3   Llama 3:        <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//   mistral  Mistral v0.3:   <s>[INST] {system}\n\n{user}[/INST] {assistant}</s>
// The caller tokenizes the result with special-token parsing on, so "[INST]"-style text that is a
// control token ("<|eot_id|>", "<s>") becomes that token.
#pragma once
#include <string>
#include <vector>

namespace slake {

enum class ChatFormat { Llama2, Llama3, Mistral };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (Llama 3 renders any role name as given)
  std::string content;
};

// "llama2", "llama3", "mistral".
const char* chat_format_name(ChatFormat f);
// The names above joined as "llama2, llama3, mistral", for messages.
std::string chat_format_names();

// The format called `name` (one of the names above; "mistral-v3" is also accepted, llama.cpp's
// name for it). Throws slake::Error("unknown chat template '<name>' (known: llama2, llama3, mistral)").
ChatFormat chat_format_from_name(const std::string& name);

// Recognises a model's own template (GGUF tokenizer.chat_template, or chat_template in a Hugging
// Face tokenizer_config.json) by substrings that only that family's official template has, as
// llama.cpp's llm_chat_detect_template does; a bare name as above is accepted too. Returns false
// for an empty or unrecognised template (ChatML, Mistral v1/v7/Tekken, ...), leaving `out` as is.
bool detect_chat_format(const std::string& jinja, ChatFormat& out);

// The token texts that the templates insert (the vocabulary's BOS and EOS pieces; "" when the
// vocabulary has none).
struct ChatSpecialTokens {
  std::string bos;
  std::string eos;
};

// The conversation as the official template renders it, with the generation prompt (the start of
// the assistant's turn) when `add_generation_prompt` and the format has one (Llama 3; Llama 2 and
// Mistral end a user turn with [/INST], which is already the cue).
//
// As the official templates: Llama 2 strips whitespace around every message and wraps the first
// user message with the system block; Llama 3 trims every message; Mistral trims assistant
// messages only. Llama 2 and Mistral require an optional system message first and then
// user/assistant turns alternating from a user turn (their templates raise an exception
// otherwise; here: slake::Error).
//
// One deliberate difference: Mistral v0.3's Jinja puts the system message before the *last* user
// message; here it goes before the *first* one (as llama.cpp and mistral-common's v1 tokenizer
// do). For one user message the two are the same; for longer conversations this keeps the render
// of a conversation a prefix of the render of its continuation, so a chat can keep its KV cache
// between turns instead of re-reading everything.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const ChatSpecialTokens& special);

}  // namespace slake
