// Vocabulary loading: the tokenizer.ggml.* keys of a GGUF file and a Hugging Face tokenizer.json,
// for load_model (a model's own vocabulary) and load_vocab (vocabulary-only GGUF files, tokenizer
// directories).
#include <sys/stat.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "pretokenizer.h"
#include "slake/error.h"
#include "slake/format/gguf.h"
#include "slake/format/mapped_file.h"
#include "slake/tokenizer/vocab.h"
#include "slake/tokenizer/vocab_readers.h"

namespace slake {
namespace detail {

namespace {

using nlohmann::json;

const char* const kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

int token_id(const GgufFile& g, const std::string& key, size_t n_tokens) {
  if (!g.has(key)) return -1;
  const uint64_t v = g.get_uint(key);
  if (v == 0xFFFFFFFFull || v == std::numeric_limits<uint64_t>::max()) return -1;  // "none"
  if (v >= n_tokens) fail(g.name() + ": " + key + " = " + std::to_string(v) + " is outside the vocabulary");
  return static_cast<int>(v);
}

// Fields of tokenizer.json objects, with a fallback when absent or of another type (a hand-edited
// file must give a clear result, never a JSON library exception).
std::string string_field(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
}
bool bool_field(const json& o, const char* key, bool fallback) {
  return o.is_object() && o.contains(key) && o[key].is_boolean() ? o[key].get<bool>() : fallback;
}

int first_id(const json& v) {
  if (v.is_number_integer()) return v.get<int>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int>();
  return -1;
}

// Whether a SentencePiece-style tokenizer.json puts "▁" before the text: Llama 2's normalizer
// (Prepend "▁"), or a Metaspace pre-tokenizer whose prepend_scheme is not "never" (older files:
// add_prefix_space).
bool prepends_space(const json& node) {
  const std::string type = string_field(node, "type");
  if (type == "Sequence") {
    for (const char* key : {"normalizers", "pretokenizers"})
      if (node.contains(key) && node[key].is_array())
        for (const json& child : node[key])
          if (prepends_space(child)) return true;
    return false;
  }
  if (type == "Prepend") return string_field(node, "prepend") == kSpaceMarker;
  if (type == "Metaspace") {
    const std::string scheme = string_field(node, "prepend_scheme");
    return scheme.empty() ? bool_field(node, "add_prefix_space", true) : scheme != "never";
  }
  return false;
}

// A byte-level tokenizer.json's pre-tokenizer as the tokenizer.ggml.pre name llama.cpp would give
// it: a Split on Llama 3's regex is "llama-bpe", a ByteLevel that applies GPT-2's own regex is
// "gpt-2". Another regex gets a name that the tokenizer rejects with the regex in the message.
std::string pretokenizer_name(const json& node) {
  const std::string type = string_field(node, "type");
  if (type == "Sequence") {
    if (!node.contains("pretokenizers") || !node["pretokenizers"].is_array()) return "";
    const json& children = node["pretokenizers"];
    // SmolLM's: every digit alone, then GPT-2's byte-level regex.
    if (children.size() == 2 && string_field(children[0], "type") == "Digits" &&
        bool_field(children[0], "individual_digits", false) && pretokenizer_name(children[1]) == "gpt-2")
      return "smollm";
    for (const json& child : children) {
      std::string name = pretokenizer_name(child);
      if (!name.empty()) return name;
    }
    return "";
  }
  if (type == "Split") {
    const std::string regex = node.contains("pattern") ? string_field(node["pattern"], "Regex") : std::string();
    if (const PreTokenizer* p = find_pretokenizer_by_pattern(regex)) return p->name;
    return "tokenizer.json Split regex '" + regex + "'";
  }
  if (type == "ByteLevel") return bool_field(node, "use_regex", true) ? "gpt-2" : "";
  return "";
}

bool is_regular_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The chat template of the tokenizer_config.json beside tokenizer.json: a string, or (newer files)
// a list of {name, template} whose "default" entry is the chat template. "" when there is none.
std::string read_chat_template(const std::string& tokenizer_json_path) {
  const size_t slash = tokenizer_json_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : tokenizer_json_path.substr(0, slash);
  const std::string path = dir + "/tokenizer_config.json";
  if (!is_regular_file(path)) return "";
  const json cfg = parse_json_file(path);
  if (!cfg.is_object() || !cfg.contains("chat_template")) return "";
  const json& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const json& named : t)
      if (string_field(named, "name") == "default") return string_field(named, "template");
  return "";
}

}  // namespace

json parse_json_file(const std::string& path) {
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    fail(path + ": malformed JSON: " + e.what());
  }
}

Vocab read_vocab(const GgufFile& g) {
  Vocab v;
  if (!g.has("tokenizer.ggml.tokens")) return v;
  v.model = g.get_string("tokenizer.ggml.model", "");
  v.pre = g.get_string("tokenizer.ggml.pre", "");
  const GgufValue& toks = g.get_array("tokenizer.ggml.tokens", GgufType::STRING);
  for (const GgufValue& t : toks.arr) v.tokens.push_back(t.str);
  const size_t n = v.tokens.size();
  if (g.has("tokenizer.ggml.scores")) {
    const GgufValue& s = g.get_array("tokenizer.ggml.scores", GgufType::FLOAT32);
    if (s.arr.size() != n) fail(g.name() + ": tokenizer.ggml.scores has " + std::to_string(s.arr.size()) + " entries for " + std::to_string(n) + " tokens");
    for (const GgufValue& x : s.arr) v.scores.push_back(static_cast<float>(x.f));
  }
  if (g.has("tokenizer.ggml.token_type")) {
    const GgufValue& s = g.get_array("tokenizer.ggml.token_type", GgufType::INT32);
    if (s.arr.size() != n) fail(g.name() + ": tokenizer.ggml.token_type has " + std::to_string(s.arr.size()) + " entries for " + std::to_string(n) + " tokens");
    for (const GgufValue& x : s.arr) v.types.push_back(static_cast<int32_t>(x.i));
  }
  if (g.has("tokenizer.ggml.merges")) {
    for (const GgufValue& x : g.get_array("tokenizer.ggml.merges", GgufType::STRING).arr) v.merges.push_back(x.str);
  }
  v.bos = token_id(g, "tokenizer.ggml.bos_token_id", n);
  v.eos = token_id(g, "tokenizer.ggml.eos_token_id", n);
  v.unk = token_id(g, "tokenizer.ggml.unknown_token_id", n);
  v.eot = token_id(g, "tokenizer.ggml.eot_token_id", n);
  v.add_bos = g.get_bool("tokenizer.ggml.add_bos_token", v.model == "llama");
  v.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix", true);
  v.chat_template = g.get_string("tokenizer.chat_template", "");
  return v;
}

// The vocabulary of tokenizer.json (BPE models: Llama 2/Mistral with byte fallback, Llama 3 byte-level).
Vocab read_tokenizer_json(const std::string& path, const json& cfg) {
  Vocab v;
  const json t = parse_json_file(path);
  if (!t.is_object() || !t.contains("model") || !t["model"].is_object()) fail(path + ": no model object");
  const json& model = t["model"];
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(path + ": model.vocab is not an object");
  const bool byte_fallback = bool_field(model, "byte_fallback", false);
  v.model = byte_fallback ? "llama" : "gpt2";
  if (byte_fallback) {
    v.add_space_prefix = prepends_space(t.value("normalizer", json())) || prepends_space(t.value("pre_tokenizer", json()));
  } else {
    v.pre = pretokenizer_name(t.value("pre_tokenizer", json()));
  }
  auto place = [&](const std::string& piece, const json& idj) {
    if (!idj.is_number_integer() || idj.get<int64_t>() < 0 || idj.get<int64_t>() > 10000000)
      fail(path + ": token id of '" + piece + "' is not a valid id");
    const size_t id = idj.get<size_t>();
    if (id >= v.tokens.size()) {
      v.tokens.resize(id + 1);
      v.types.resize(id + 1, 5);  // unused until seen
    }
    v.tokens[id] = piece;
    return id;
  };
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const size_t id = place(it.key(), it.value());
    const std::string& p = it.key();
    v.types[id] = (byte_fallback && p.size() == 6 && p.rfind("<0x", 0) == 0 && p.back() == '>') ? 6 : 1;
  }
  if (t.contains("added_tokens") && t["added_tokens"].is_array()) {
    for (const json& a : t["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id")) fail(path + ": malformed added_tokens entry");
      const size_t id = place(a["content"].get<std::string>(), a["id"]);
      v.types[id] = bool_field(a, "special", false) ? 3 : 4;
    }
  }
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const json& m : model["merges"]) {
      if (m.is_string()) v.merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else fail(path + ": malformed merges entry");
    }
  }
  const int nt = static_cast<int>(v.tokens.size());
  auto id_or_none = [&](int id) { return id >= 0 && id < nt ? id : -1; };
  v.bos = id_or_none(cfg.contains("bos_token_id") ? first_id(cfg["bos_token_id"]) : -1);
  v.eos = id_or_none(cfg.contains("eos_token_id") ? first_id(cfg["eos_token_id"]) : -1);
  if (byte_fallback) {
    for (int i = 0; i < nt; ++i)
      if (v.tokens[static_cast<size_t>(i)] == "<unk>") v.unk = i;
    if (v.unk >= 0) v.types[static_cast<size_t>(v.unk)] = 2;
  }
  if (v.bos >= 0) v.types[static_cast<size_t>(v.bos)] = 3;
  if (v.eos >= 0) v.types[static_cast<size_t>(v.eos)] = 3;
  v.chat_template = read_chat_template(path);
  return v;
}

}  // namespace detail

Vocab load_vocab(const std::string& path) {
  using nlohmann::json;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path + ": no such file or directory");
  if (S_ISDIR(st.st_mode)) {
    const std::string tokenizer = path + "/tokenizer.json", config = path + "/config.json";
    if (!detail::is_regular_file(tokenizer)) fail(path + ": not a tokenizer directory (no tokenizer.json)");
    json cfg = json::object();
    if (detail::is_regular_file(config)) {
      cfg = detail::parse_json_file(config);
      if (!cfg.is_object()) fail(config + ": not a JSON object");
    }
    Vocab v = detail::read_tokenizer_json(tokenizer, cfg);
    if (v.tokens.empty()) fail(tokenizer + ": the vocabulary is empty");
    return v;
  }
  Vocab v = detail::read_vocab(GgufFile::open(path));
  if (v.tokens.empty()) fail(path + ": no vocabulary (tokenizer.ggml.tokens is missing)");
  return v;
}

}  // namespace slake
