// Chat templates: a conversation (system, user and assistant messages) as the one prompt string
// that an instruction-tuned model was trained on. Either the model's own Jinja template, rendered
// by slake/jinja.h as transformers renders it (ChatTemplate::jinja), or one of the built-in
// formats below, written out in C++ (llama.cpp's set, chosen by name or recognised from the
// model's template text). The first three, from the official templates:
//   llama2   Llama 2 chat:   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
//   llama3   Llama 3:        <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//   mistral  Mistral v0.3:   <s>[INST] {system}\n\n{user}[/INST] {assistant}</s>
// The caller tokenizes the result with special-token parsing on, so "[INST]"-style text that is a
// control token ("<|eot_id|>", "<s>") becomes that token.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace slake {

// The others follow llama.cpp's llm_chat_apply_template: mistral-v1 (" [INST] ... [/INST]"),
// mistral-v3-tekken, mistral-v7 ([SYSTEM_PROMPT]), chatml (<|im_start|>role\n...<|im_end|>\n),
// zephyr (<|role|>\n...<|endoftext|>\n), vicuna (USER: / ASSISTANT:), deepseek (### Instruction: /
// ### Response:, deepseek-coder), falcon3 (<|role|>\n...\n) and alpaca (### Instruction: /
// ### Response: with blank lines, Stanford Alpaca's) and gemma (<start_of_turn>role\n...<end_of_turn>\n,
// by name only: a model's own Gemma template is rendered by the Jinja engine).
enum class ChatFormat {
  Llama2, Llama3, Mistral /* v3 */, MistralV1, MistralV3Tekken, MistralV7, ChatML, Zephyr, Vicuna, DeepSeek, Falcon3, Alpaca,
  Gemma
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool" (Llama 3 renders any role name as given)
  std::string content;
  // An assistant's tool calls: a JSON array of OpenAI's tool_calls, each function's arguments an
  // object (as Hugging Face templates expect them); "" : none. Jinja templates only.
  std::string tool_calls = {};
  std::string tool_call_id = {};  // a tool message: the call it answers
  std::string name = {};          // a tool message: the function that answered
};

// "llama2", "llama3", "mistral-v3", "mistral-v1", ..., as llama.cpp names them.
const char* chat_format_name(ChatFormat f);
// The names above joined with ", ", for messages.
std::string chat_format_names();

// The format called `name` (one of the names above; "mistral" is accepted for mistral-v3).
// Throws slake::Error("unknown chat template '<name>' (known: llama2, llama3, ...)").
ChatFormat chat_format_from_name(const std::string& name);

// Recognises a model's own template (GGUF tokenizer.chat_template, or chat_template in a Hugging
// Face tokenizer_config.json) by substrings that only that family's official template has, as
// llama.cpp's llm_chat_detect_template does; a bare name as above is accepted too. Returns false
// for an empty or unrecognised template, leaving `out` as is.
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

// A chat template to render with: a built-in format, or a Jinja template (a model's own, or one
// from a file) rendered with the variables transformers passes: messages, add_generation_prompt,
// bos_token, eos_token, tools.
class ChatTemplate {
 public:
  static ChatTemplate builtin(ChatFormat format);
  // Parses `source`; throws slake::Error naming `name` and the line on a syntax error.
  static ChatTemplate jinja(const std::string& source, const std::string& name);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Throws slake::Error when the template raises (raise_exception) or fails. `tools`: OpenAI's
  // tools as a JSON array ("" : none), passed to a Jinja template as transformers passes them; a
  // built-in format takes no tools or tool calls (slake::Error).
  // `kwargs`: a JSON object of more variables for a Jinja template (transformers' extra keyword
  // arguments: enable_thinking, ...); a built-in format takes none.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const ChatSpecialTokens& special, const std::string& tools = "", const std::string& kwargs = "") const;
  bool is_jinja() const { return jinja_ != nullptr; }
  // A Jinja template's source ("" for a built-in format).
  const std::string& source() const;
  // "chatml (built-in)", or "<name> (Jinja)".
  std::string describe() const;

 private:
  ChatTemplate() = default;
  ChatFormat format_ = ChatFormat::ChatML;
  struct Jinja;
  std::unique_ptr<Jinja> jinja_;
};

}  // namespace slake
