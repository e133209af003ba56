#include "slake/model/llama2c.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "slake/error.h"
#include "slake/format/mapped_file.h"
#include "slake/format/writers.h"

namespace slake {

namespace {

struct L2cConfig {
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;
};

struct L2cTokenizer {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

L2cTokenizer read_tokenizer(const std::string& path, int vocab_size) {
  auto buf = map_file(path);
  const uint8_t* p = buf->data();
  size_t pos = 0, size = buf->size();
  auto need = [&](size_t n) {
    if (n > size - pos) fail(path + ": truncated llama2.c tokenizer");
  };
  need(4);
  int32_t max_len;
  std::memcpy(&max_len, p, 4);
  pos = 4;
  if (max_len <= 0 || max_len > 4096) fail(path + ": max token length " + std::to_string(max_len) + " is absurd");
  L2cTokenizer t;
  for (int i = 0; i < vocab_size; ++i) {
    need(8);
    float score;
    int32_t len;
    std::memcpy(&score, p + pos, 4);
    std::memcpy(&len, p + pos + 4, 4);
    pos += 8;
    if (len < 0 || len > max_len) fail(path + ": token " + std::to_string(i) + " has length " + std::to_string(len));
    need(static_cast<size_t>(len));
    t.pieces.emplace_back(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(len));
    t.scores.push_back(score);
    pos += static_cast<size_t>(len);
  }
  return t;
}

// llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte.
std::vector<int32_t> token_types(const std::vector<std::string>& pieces) {
  std::vector<int32_t> types;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string& s = pieces[i];
    if (i == 0) types.push_back(2);
    else if (i == 1 || i == 2) types.push_back(3);
    else if (s.size() == 6 && s.rfind("<0x", 0) == 0 && s.back() == '>') types.push_back(6);
    else types.push_back(1);
  }
  return types;
}

// SentencePiece pieces use U+2581 for spaces; llama2.c stores them with plain spaces.
std::string to_sentencepiece(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == ' ') ? std::string("\xE2\x96\x81") : std::string(1, c);
  return out;
}

std::vector<uint8_t> f32_bytes(const float* data, size_t n) {
  std::vector<uint8_t> b(n * 4);
  std::memcpy(b.data(), data, b.size());
  return b;
}

// GGUF (adjacent pairs) -> HF (rotate half): HF row h*hd + c*hd/2 + i is GGUF row h*hd + 2i + c.
std::vector<float> unpermute_rows(const float* w, int n_heads, int head_dim, int cols) {
  std::vector<float> out(static_cast<size_t>(n_heads) * head_dim * cols);
  for (int h = 0; h < n_heads; ++h)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < head_dim / 2; ++i) {
        const size_t dst = static_cast<size_t>(h * head_dim + c * head_dim / 2 + i) * cols;
        const size_t src = static_cast<size_t>(h * head_dim + 2 * i + c) * cols;
        std::memcpy(out.data() + dst, w + src, sizeof(float) * cols);
      }
  return out;
}

std::string tokenizer_json(const L2cTokenizer& tok, const std::vector<std::string>& sp, const std::vector<int32_t>& types) {
  using json = nlohmann::ordered_json;
  json vocab = json::object();
  for (size_t i = 0; i < sp.size(); ++i) vocab[sp[i]] = i;
  // Merges as transformers' SentencePiece extractor makes them: every split of a piece into two
  // pieces of the vocabulary, ordered by the merged piece's score (higher first).
  std::vector<size_t> order(sp.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tok.scores[a] > tok.scores[b]; });
  std::map<std::string, size_t> id_of;
  for (size_t i = 0; i < sp.size(); ++i) id_of.emplace(sp[i], i);
  json merges = json::array();
  for (size_t id : order) {
    if (types[id] != 1) continue;
    const std::string& piece = sp[id];
    std::vector<std::pair<size_t, size_t>> splits;
    for (size_t k = 1; k < piece.size(); ++k) {
      auto l = id_of.find(piece.substr(0, k)), r = id_of.find(piece.substr(k));
      if (l != id_of.end() && r != id_of.end() && types[l->second] == 1 && types[r->second] == 1)
        splits.emplace_back(l->second, r->second);
    }
    std::sort(splits.begin(), splits.end());
    for (auto [l, r] : splits) merges.push_back(json::array({sp[l], sp[r]}));
  }
  json added = json::array();
  for (size_t i = 0; i < 3 && i < sp.size(); ++i)
    added.push_back({{"id", i}, {"content", sp[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  json t = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({
          {{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", json::array({
          {{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", sp.empty() ? "" : sp[0]},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                 {"byte_fallback", true}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}}},
  };
  return t.dump(1);
}

}  // namespace

void convert_llama2c(const std::string& checkpoint, const std::string& tokenizer, const std::string& gguf_path,
                     const std::string& hf_dir) {
  auto buf = map_file(checkpoint);
  if (buf->size() < 28) fail(checkpoint + ": truncated llama2.c checkpoint (no header)");
  int32_t h[7];
  std::memcpy(h, buf->data(), sizeof(h));
  L2cConfig c{h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.vocab_size <= 0 ||
      c.seq_len <= 0 || c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 || c.dim > 65536 || c.n_layers > 1024 ||
      c.hidden_dim > 1 << 20 || c.vocab_size > 1 << 22)
    fail(checkpoint + ": not a llama2.c checkpoint (implausible header)");
  const int hd = c.dim / c.n_heads, kv_dim = c.n_kv_heads * hd;
  const size_t D = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, KV = kv_dim;
  // Sizes in floats, in file order.
  const size_t sz_emb = V * D, sz_rms = L * D, sz_q = L * D * D, sz_k = L * KV * D, sz_o = L * D * D;
  const size_t sz_ffn = L * F * D, sz_final = D, sz_freq = static_cast<size_t>(c.seq_len) * hd / 2;
  size_t expect = sz_emb + 2 * sz_rms + sz_q + 2 * sz_k + sz_o + 3 * sz_ffn + sz_final + 2 * sz_freq;
  if (!c.shared_classifier) expect += V * D;
  if (buf->size() != 28 + expect * 4)
    fail(checkpoint + ": file has " + std::to_string(buf->size()) + " bytes, the header implies " + std::to_string(28 + expect * 4));
  const float* p = reinterpret_cast<const float*>(buf->data() + 28);
  const float* emb = p; p += sz_emb;
  const float* rms_att = p; p += sz_rms;
  const float* wq = p; p += sz_q;
  const float* wk = p; p += sz_k;
  const float* wv = p; p += sz_k;
  const float* wo = p; p += sz_o;
  const float* rms_ffn = p; p += sz_rms;
  const float* w1 = p; p += sz_ffn;
  const float* w2 = p; p += sz_ffn;
  const float* w3 = p; p += sz_ffn;
  const float* rms_final = p; p += sz_final;
  p += 2 * sz_freq;
  const float* wcls = c.shared_classifier ? nullptr : p;

  const L2cTokenizer tok = read_tokenizer(tokenizer, c.vocab_size);
  // llama2.c stores BOS/EOS as "\n<s>\n" and "\n</s>\n"; ids 0-2 get their usual names, as
  // llama.cpp's converter gives them.
  std::vector<std::string> sp;
  for (const auto& s : tok.pieces) sp.push_back(to_sentencepiece(s));
  const char* const special[] = {"<unk>", "<s>", "</s>"};
  for (size_t i = 0; i < 3 && i < sp.size(); ++i) sp[i] = special[i];
  const std::vector<int32_t> types = token_types(tok.pieces);

  if (!gguf_path.empty()) {
    GgufWriter w;
    w.set_str("general.architecture", "llama");
    w.set_str("general.name", "llama2.c");
    w.set_u32("llama.context_length", static_cast<uint32_t>(c.seq_len));
    w.set_u32("llama.embedding_length", static_cast<uint32_t>(c.dim));
    w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
    w.set_u32("llama.block_count", static_cast<uint32_t>(c.n_layers));
    w.set_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
    w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(hd));
    w.set_f32("llama.rope.freq_base", 10000.0f);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_str_array("tokenizer.ggml.tokens", sp);
    w.set_f32_array("tokenizer.ggml.scores", tok.scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    const int64_t d = c.dim, f = c.hidden_dim, kv = kv_dim, v = c.vocab_size;
    w.add_f32_tensor("token_embd.weight", {d, v}, emb);
    w.add_f32_tensor("output_norm.weight", {d}, rms_final);
    if (wcls) w.add_f32_tensor("output.weight", {d, v}, wcls);
    for (size_t l = 0; l < L; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      w.add_f32_tensor(b + "attn_norm.weight", {d}, rms_att + l * D);
      w.add_f32_tensor(b + "attn_q.weight", {d, d}, wq + l * D * D);
      w.add_f32_tensor(b + "attn_k.weight", {d, kv}, wk + l * KV * D);
      w.add_f32_tensor(b + "attn_v.weight", {d, kv}, wv + l * KV * D);
      w.add_f32_tensor(b + "attn_output.weight", {d, d}, wo + l * D * D);
      w.add_f32_tensor(b + "ffn_norm.weight", {d}, rms_ffn + l * D);
      w.add_f32_tensor(b + "ffn_gate.weight", {d, f}, w1 + l * F * D);
      w.add_f32_tensor(b + "ffn_down.weight", {f, d}, w2 + l * D * F);
      w.add_f32_tensor(b + "ffn_up.weight", {d, f}, w3 + l * F * D);
    }
    w.write(gguf_path);
  }

  if (!hf_dir.empty()) {
    nlohmann::ordered_json cfg = {
        {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.dim},
        {"intermediate_size", c.hidden_dim}, {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
        {"num_key_value_heads", c.n_kv_heads}, {"head_dim", hd}, {"vocab_size", c.vocab_size},
        {"max_position_embeddings", c.seq_len}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
        {"hidden_act", "silu"}, {"tie_word_embeddings", c.shared_classifier}, {"bos_token_id", 1},
        {"eos_token_id", 2}, {"torch_dtype", "float32"}};
    write_file(hf_dir + "/config.json", cfg.dump(2) + "\n");
    std::vector<SafetensorsEntry> ts;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, const float* data) {
      size_t n = 1;
      for (int64_t s : shape) n *= static_cast<size_t>(s);
      ts.push_back({name, "F32", std::move(shape), f32_bytes(data, n)});
    };
    const int64_t d = c.dim, f = c.hidden_dim, kv = kv_dim, v = c.vocab_size;
    add("model.embed_tokens.weight", {v, d}, emb);
    add("model.norm.weight", {d}, rms_final);
    if (wcls) add("lm_head.weight", {v, d}, wcls);
    for (size_t l = 0; l < L; ++l) {
      const std::string b = "model.layers." + std::to_string(l) + ".";
      const std::vector<float> q = unpermute_rows(wq + l * D * D, c.n_heads, hd, c.dim);
      const std::vector<float> k = unpermute_rows(wk + l * KV * D, c.n_kv_heads, hd, c.dim);
      add(b + "input_layernorm.weight", {d}, rms_att + l * D);
      add(b + "self_attn.q_proj.weight", {d, d}, q.data());
      add(b + "self_attn.k_proj.weight", {kv, d}, k.data());
      add(b + "self_attn.v_proj.weight", {kv, d}, wv + l * KV * D);
      add(b + "self_attn.o_proj.weight", {d, d}, wo + l * D * D);
      add(b + "post_attention_layernorm.weight", {d}, rms_ffn + l * D);
      add(b + "mlp.gate_proj.weight", {f, d}, w1 + l * F * D);
      add(b + "mlp.down_proj.weight", {d, f}, w2 + l * D * F);
      add(b + "mlp.up_proj.weight", {f, d}, w3 + l * F * D);
    }
    write_file(hf_dir + "/model.safetensors", safetensors_bytes(ts, {{"format", "pt"}}));
    write_file(hf_dir + "/tokenizer.json", tokenizer_json(tok, sp, types) + "\n");
  }
}

}  // namespace slake
