// Chat templates. The expected strings were derived by hand from the published Jinja templates of
// meta-llama/Llama-2-7b-chat-hf, meta-llama/Meta-Llama-3-8B-Instruct and
// mistralai/Mistral-7B-Instruct-v0.3 (tokenizer_config.json "chat_template"), evaluating each
// template's expressions for the messages below; nothing was rendered by a Jinja engine. The
// template texts used for detection are copied from those files (Mistral's shortened to the parts
// around [INST]).
#include <fstream>

#include "slake/chat_template.h"
#include "slake/error.h"
#include "slake/tokenizer/vocab.h"
#include "test_util.h"

namespace slake {
namespace {

const ChatSpecialTokens kSpm{"<s>", "</s>"};
const ChatSpecialTokens kLlama3{"<|begin_of_text|>", "<|end_of_text|>"};

const char* const kLlama2Jinja =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

const char* const kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

const char* const kMistralV3Jinja =
    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messages[0][\"content\"] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n"
    "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if tools is not none and (message == user_messages[-1]) %}\n"
    "            {{- \"[AVAILABLE_TOOLS] [\" }}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- else %}\n            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n"
    "    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- \" \" + message[\"content\"]|trim + eos_token}}\n";

std::vector<ChatMessage> conversation() {
  return {{"system", "You are a helpful assistant."},
          {"user", "Hello!"},
          {"assistant", "Hi, how can I help?"},
          {"user", "Tell me a story."}};
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(render_chat(ChatFormat::Llama2, conversation(), true, kSpm),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi, how can I help? "
            "</s><s>[INST] Tell me a story. [/INST]");
  // No system message; content.strip() on both roles; no generation prompt in this template.
  EXPECT_EQ(render_chat(ChatFormat::Llama2, {{"user", "  Hello \n"}, {"assistant", "\tHi "}}, true, kSpm),
            "<s>[INST] Hello [/INST] Hi </s>");
  // The system block is part of the first content, so the strip applies to the whole.
  EXPECT_EQ(render_chat(ChatFormat::Llama2, {{"system", " S "}, {"user", "U "}}, false, kSpm),
            "<s>[INST] <<SYS>>\n S \n<</SYS>>\n\nU [/INST]");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_chat(ChatFormat::Llama3, conversation(), true, kLlama3),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi, how can I help?<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nTell me a story.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // | trim applies to the content only; without add_generation_prompt nothing follows the last turn.
  EXPECT_EQ(render_chat(ChatFormat::Llama3, {{"user", " Hi \n"}}, false, kLlama3),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, Mistral) {
  // One user message: the official template and ours agree on where the system message goes.
  EXPECT_EQ(render_chat(ChatFormat::Mistral, {{"system", "Be brief."}, {"user", "Hello!"}}, true, kSpm),
            "<s>[INST] Be brief.\n\nHello![/INST]");
  // User content is not trimmed, assistant content is.
  const std::vector<ChatMessage> spaced{{"user", " Hello "}, {"assistant", " Hi \n"}, {"user", "Again"}};
  EXPECT_EQ(render_chat(ChatFormat::Mistral, spaced, true, kSpm), "<s>[INST]  Hello [/INST] Hi</s>[INST] Again[/INST]");
  // Several user messages: the system message goes before the first (the official v0.3 template
  // would put it before the last one; see chat_template.h for why).
  EXPECT_EQ(render_chat(ChatFormat::Mistral, conversation(), true, kSpm),
            "<s>[INST] You are a helpful assistant.\n\nHello![/INST] Hi, how can I help?</s>[INST] Tell me a "
            "story.[/INST]");
}

TEST(ChatTemplate, EachTurnExtendsThePreviousRender) {
  // What lets slake-cli keep its context between turns: the conversation so far renders to a
  // prefix of the conversation with one more user message.
  for (ChatFormat f : {ChatFormat::Llama2, ChatFormat::Llama3, ChatFormat::Mistral}) {
    std::vector<ChatMessage> history{{"system", "S"}};
    for (int turn = 0; turn < 3; ++turn) {
      const std::string before = render_chat(f, history, false, kSpm);
      history.push_back({"user", "question " + std::to_string(turn)});
      const std::string after = render_chat(f, history, true, kSpm);
      EXPECT_EQ(after.compare(0, before.size(), before), 0) << chat_format_name(f) << " turn " << turn;
      history.push_back({"assistant", "answer " + std::to_string(turn)});
    }
  }
}

TEST(ChatTemplate, RolesMustAlternateWhereTheTemplateSaysSo) {
  for (ChatFormat f : {ChatFormat::Llama2, ChatFormat::Mistral}) {
    auto error = [f](const std::vector<ChatMessage>& m) { return test::error_of([&] { render_chat(f, m, true, kSpm); }); };
    EXPECT_NE(error({{"user", "a"}, {"user", "b"}}).find("message 2 has role 'user' where 'assistant'"), std::string::npos);
    EXPECT_NE(error({{"assistant", "a"}}).find("message 1 has role 'assistant'"), std::string::npos);
    EXPECT_NE(error({{"user", "a"}, {"system", "b"}}).find("role 'system'"), std::string::npos);
  }
  // Llama 3's template renders any sequence of roles.
  EXPECT_EQ(render_chat(ChatFormat::Llama3, {{"ipython", "x"}}, false, kLlama3),
            "<|begin_of_text|><|start_header_id|>ipython<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplate, Names) {
  EXPECT_EQ(chat_format_from_name("llama2"), ChatFormat::Llama2);
  EXPECT_EQ(chat_format_from_name("llama3"), ChatFormat::Llama3);
  EXPECT_EQ(chat_format_from_name("mistral"), ChatFormat::Mistral);
  EXPECT_EQ(chat_format_from_name("mistral-v3"), ChatFormat::Mistral);
  EXPECT_EQ(chat_format_from_name("chatml"), ChatFormat::ChatML);
  EXPECT_EQ(chat_format_from_name("gemma"), ChatFormat::Gemma);
  EXPECT_EQ(test::error_of([] { chat_format_from_name("gemma4"); }),
            "unknown chat template 'gemma4' (known: llama2, llama3, mistral-v3, mistral-v1, mistral-v3-tekken, mistral-v7, "
            "chatml, zephyr, vicuna, deepseek, falcon3, alpaca, gemma)");
}

TEST(ChatTemplate, DetectsTheOfficialTemplates) {
  ChatFormat f = ChatFormat::Llama3;
  EXPECT_TRUE(detect_chat_format(kLlama2Jinja, f));
  EXPECT_EQ(f, ChatFormat::Llama2);
  EXPECT_TRUE(detect_chat_format(kLlama3Jinja, f));
  EXPECT_EQ(f, ChatFormat::Llama3);
  EXPECT_TRUE(detect_chat_format(kMistralV3Jinja, f));
  EXPECT_EQ(f, ChatFormat::Mistral);
  EXPECT_TRUE(detect_chat_format("llama2", f));
  EXPECT_EQ(f, ChatFormat::Llama2);
}

TEST(ChatTemplate, DetectsTheOtherBuiltInFormatsAsLlamaCppDoes) {
  const std::pair<const char*, ChatFormat> cases[] = {
      // ChatML
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
       "'\\n'}}{% endfor %}",
       ChatFormat::ChatML},
      // Mistral v1 (a space before [INST]) and Tekken ("[INST]" right before the content)
      {"{{- bos_token }}{%- if tools %}[AVAILABLE_TOOLS]{% endif %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}",
       ChatFormat::MistralV1},
      {"{{- bos_token }}[AVAILABLE_TOOLS]{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}", ChatFormat::MistralV3Tekken},
      {"{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST]' + message['content'] + '[/INST]' }}",
       ChatFormat::MistralV7},
      {"{{ '<|user|>\\n' + message['content'] + '<|endoftext|>' }}", ChatFormat::Zephyr},
      {"{{ '<|user|>\\n' + content + '\\n<|assistant|>\\n' + content + '</s>' }}", ChatFormat::Falcon3},
      {"{{ 'USER: ' + content + '\\nASSISTANT: ' }}", ChatFormat::Vicuna},
      {"{{ '### Instruction:\\n' + content + '\\n### Response:\\n' + content + '\\n<|EOT|>\\n' }}", ChatFormat::DeepSeek},
      {"{{ '### Instruction:\\n' + content + '\\n\\n### Response:\\n' }}", ChatFormat::Alpaca},
  };
  for (const auto& [t, want] : cases) {
    ChatFormat f = ChatFormat::Llama3;
    EXPECT_TRUE(detect_chat_format(t, f)) << t;
    EXPECT_EQ(f, want) << t;
  }
}

TEST(ChatTemplate, LeavesOtherTemplatesUnrecognised) {
  ChatFormat f = ChatFormat::Llama3;
  const char* const others[] = {
      "",
      // Mistral v0.1/v0.2 (Llama 2 without a system block)
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
      "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
      // Gemma
      "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
  };
  for (const char* t : others) {
    EXPECT_FALSE(detect_chat_format(t, f)) << t;
    EXPECT_EQ(f, ChatFormat::Llama3) << "left as it was";
  }
}

TEST(ChatTemplate, BuiltInsRenderAsTheirJinjaTemplates) {
  // The official templates, rendered by the Jinja engine, against the built-in formats.
  const char* const kChatMLJinja =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const std::pair<ChatFormat, const char*> cases[] = {
      {ChatFormat::ChatML, kChatMLJinja}, {ChatFormat::Llama2, kLlama2Jinja}, {ChatFormat::Llama3, kLlama3Jinja}};
  for (const auto& [f, src] : cases) {
    const ChatTemplate j = ChatTemplate::jinja(src, "official");
    for (bool agp : {false, true}) {
      std::vector<ChatMessage> history = conversation();
      EXPECT_EQ(j.render(history, agp, kSpm), render_chat(f, history, agp, kSpm)) << chat_format_name(f);
      history.erase(history.begin());
      EXPECT_EQ(j.render(history, agp, kSpm), render_chat(f, history, agp, kSpm)) << chat_format_name(f);
    }
  }
}

TEST(ChatTemplate, LlamaCppFormats) {
  // The strings llama.cpp's llm_chat_apply_template builds for these formats.
  const std::vector<ChatMessage> c{{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};
  auto r = [&](ChatFormat f) { return render_chat(f, c, true, kSpm); };
  EXPECT_EQ(r(ChatFormat::ChatML),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(r(ChatFormat::Zephyr), "<|system|>\nS<|endoftext|>\n<|user|>\nU1<|endoftext|>\n<|assistant|>\nA1<|endoftext|>\n"
                                   "<|user|>\nU2<|endoftext|>\n<|assistant|>\n");
  EXPECT_EQ(r(ChatFormat::Falcon3), "<|system|>\nS\n<|user|>\nU1\n<|assistant|>\nA1\n<|user|>\nU2\n<|assistant|>\n");
  EXPECT_EQ(r(ChatFormat::Vicuna), "S\n\nUSER: U1\nASSISTANT: A1</s>\nUSER: U2\nASSISTANT:");
  EXPECT_EQ(r(ChatFormat::DeepSeek), "S### Instruction:\nU1\n### Response:\nA1\n<|EOT|>\n### Instruction:\nU2\n### Response:\n");
  EXPECT_EQ(r(ChatFormat::Alpaca), "S\n\n### Instruction:\nU1\n\n### Response:\nA1\n\n### Instruction:\nU2\n\n### Response:\n");
  EXPECT_EQ(r(ChatFormat::MistralV1), " [INST] S\n\nU1 [/INST] A1</s> [INST] U2 [/INST]");
  EXPECT_EQ(r(ChatFormat::MistralV3Tekken), "[INST]S\n\nU1[/INST]A1</s>[INST]U2[/INST]");
  EXPECT_EQ(r(ChatFormat::MistralV7), "[SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] U1[/INST] A1</s>[INST] U2[/INST]");
  EXPECT_EQ(r(ChatFormat::Gemma),
            "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n<start_of_turn>user\nU2"
            "<end_of_turn>\n<start_of_turn>model\n");
  for (ChatFormat f : {ChatFormat::ChatML, ChatFormat::Zephyr, ChatFormat::Falcon3, ChatFormat::Vicuna,
                       ChatFormat::DeepSeek, ChatFormat::Alpaca, ChatFormat::MistralV1, ChatFormat::MistralV3Tekken,
                       ChatFormat::MistralV7, ChatFormat::Gemma}) {
    EXPECT_EQ(chat_format_from_name(chat_format_name(f)), f);
    const std::string before = render_chat(f, {c[0], c[1], c[2]}, false, kSpm);
    EXPECT_EQ(r(f).compare(0, before.size(), before), 0) << chat_format_name(f) << ": each turn extends the last";
  }
}

TEST(ChatTemplate, GemmaRendersAsGemma2sOwnTemplate) {
  // Gemma 2's official template (which refuses a system message) through the Jinja engine: the
  // bos_token, then the built-in format.
  SLAKE_SHARED_OR_SKIP(path, "chat-templates/google-gemma-2-2b-it.jinja");
  std::ifstream f(path);
  const std::string src((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const ChatTemplate j = ChatTemplate::jinja(src, "gemma-2");
  std::vector<ChatMessage> history = conversation();
  history.erase(history.begin());
  history[0].content = "  Hello!\n";  // trimmed by both
  for (bool agp : {false, true})
    for (size_t n = 1; n <= history.size(); ++n) {
      const std::vector<ChatMessage> h(history.begin(), history.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_EQ(j.render(h, agp, kSpm), kSpm.bos + render_chat(ChatFormat::Gemma, h, agp, kSpm)) << n;
    }
}

TEST(ChatTemplate, HuggingFaceTokenizerConfigGivesTheTemplate) {
  test::TempDir dir;
  std::ofstream(dir.file("tokenizer.json")) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
  EXPECT_EQ(load_vocab(dir.path()).chat_template, "");
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"chat_template": "{{ '[INST]' }} <<SYS>>"})";
  EXPECT_EQ(load_vocab(dir.path()).chat_template, "{{ '[INST]' }} <<SYS>>");
  // Newer files hold a list of named templates; the "default" one is the chat template.
  std::ofstream(dir.file("tokenizer_config.json"))
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(load_vocab(dir.path()).chat_template, "D");
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"chat_template": [1, 2]})";
  EXPECT_EQ(load_vocab(dir.path()).chat_template, "");
}

}  // namespace
}  // namespace slake
