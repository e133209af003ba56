// The request environment of the server's fuzz targets: a byte-level BPE vocabulary, ChatML, and a
// small Llama configuration with a context of 256 tokens; no model.
#pragma once
#include "chat_prompt.h"
#include "openai_request.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"

namespace fuzz {


// A byte-level BPE vocabulary of the 256 bytes and ChatML's two specials, no merges.
slake::Vocab byte_vocab() {
  slake::Vocab v;
  v.model = "gpt2";
  v.pre = "qwen2";
  // GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the rest shift to U+0100.
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const int cp = printable ? b : 256 + shifted++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
    v.tokens.push_back(s);
    v.types.push_back(1);
  }
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(special);
    v.types.push_back(3);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.eos = 257;
  v.add_bos = false;
  return v;
}

struct Env {
  slake::Tokenizer tokenizer{byte_vocab()};
  slake::server::ChatPrompter chat{tokenizer, "chatml", ""};
  slake::ModelConfig cfg;
  slake::server::RequestEnv request{"model", tokenizer, chat, cfg, 256, {}};
  Env() {
    cfg.arch = "llama";
    cfg.n_vocab = 258;
    cfg.dim = 64;
    cfg.n_layers = 2;
    cfg.n_heads = 4;
    cfg.n_kv_heads = 2;
    cfg.head_dim = 16;
    cfg.ffn_dim = 128;
    cfg.n_ctx_train = 256;
    request.max_piece_bytes = slake::server::longest_piece_bytes(tokenizer.vocab());
  }
};

}  // namespace fuzz
