// Internal to vocabulary loading: the readers that load_model (for a model's own vocabulary) and
// load_vocab (for a vocabulary alone) share.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "slake/tokenizer/vocab.h"

namespace slake {

class GgufFile;

namespace detail {

// The tokenizer.ggml.* keys of a GGUF file; an empty Vocab (no tokens) when the file has none.
Vocab read_vocab(const GgufFile& g);

// A Hugging Face tokenizer.json. BOS and EOS ids come from the model's config.json
// (`model_config`; an empty object when there is none), the chat template from the
// tokenizer_config.json beside it (when there is one).
Vocab read_tokenizer_json(const std::string& path, const nlohmann::json& model_config);

// Parses a JSON file; throws slake::Error("<path>: malformed JSON: ...").
nlohmann::json parse_json_file(const std::string& path);

}  // namespace detail
}  // namespace slake
