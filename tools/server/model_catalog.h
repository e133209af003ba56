// Router mode's models (slake-server started without -m): the models a folder holds
// (--models-dir) and those an INI preset file names (--models-preset), in llama-server's formats,
// each with the command line it is served with.
//
// --models-dir DIR: each .gguf file in DIR is a model named after the file without ".gguf"; each
// folder in DIR holding a Hugging Face model (config.json) or .gguf files (one model, or the first
// shard of a split one) is a model named after the folder. Files whose names start with "mmproj"
// are projectors, not models.
//
// --models-preset FILE (llama-server's preset file): each [section] is a model; its keys are
// slake-server's flags without their dashes (`ctx-size = 4096`, `c = 4096`, `kv-policy = slake`,
// `kvu = true`); a section named like a model of --models-dir sets that model's flags, any other
// needs `model = PATH`. [*] gives flags to every model. `load-on-startup = true` loads a model when
// the server starts. The flags on slake-server's command line come last and win, then the model's
// section, then [*]. Flags that belong to the router (host, port, API key, aliases, HTTP limits,
// the --models-* flags) are dropped from presets with a note.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace slake::server {

struct ModelEntry {
  std::string id;    // the name requests give in "model"
  std::string path;  // what -m would be
  std::vector<std::string> preset_args;  // the preset's flags for it ([*] then its section), as arguments
  bool load_on_startup = false;
};

// The models of --models-dir `dir` and --models-preset `preset` ("" : none), sorted by id.
// `flags`: slake-server's flags, to spell preset keys as arguments. Notes on dropped keys go to
// `notes`. Throws slake::Error for an unreadable folder or file, a malformed preset, a key that
// is no flag, a preset model without a path, or two models of one name.
std::vector<ModelEntry> find_models(const std::string& dir, const std::string& preset, const CLI::App& flags,
                                    std::vector<std::string>* notes);

}  // namespace slake::server
