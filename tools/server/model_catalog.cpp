#include "model_catalog.h"

#include <algorithm>
#include <boost/property_tree/ini_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <filesystem>
#include <set>

#include "slake/error.h"

namespace slake::server {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_model_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return ends_with(name, ".gguf") && name.rfind("mmproj", 0) != 0;
}

// The model a folder of --models-dir holds: itself (Hugging Face), its one .gguf file, or the first
// shard of a split file; "" when it holds none.
std::string model_in_folder(const fs::path& dir) {
  if (fs::exists(dir / "config.json")) return dir.string();
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file() && is_model_file(f.path())) files.push_back(f.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) return "";
  if (files.size() > 1 && files.front().find("-00001-of-") == std::string::npos)
    fail(dir.string() + " holds " + std::to_string(files.size()) +
         " .gguf files: a folder of --models-dir holds one model (one file, or the shards of one)");
  return files.front();
}

std::vector<ModelEntry> models_in_dir(const std::string& dir) {
  std::vector<ModelEntry> out;
  if (dir.empty()) return out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("--models-dir " + dir + ": not a directory");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (e.is_regular_file() && is_model_file(e.path())) {
      out.push_back({name.substr(0, name.size() - 5), e.path().string(), {}, false});
    } else if (e.is_directory()) {
      const std::string p = model_in_folder(e.path());
      if (!p.empty()) out.push_back({name, p, {}, false});
    }
  }
  return out;
}

// Flags that belong to the router, not to one model.
const std::set<std::string>& router_keys() {
  static const std::set<std::string> keys = {
      "host", "port", "api-key", "a", "alias", "models-dir", "models-preset", "models-max", "models-memory",
      "models-autoload", "no-models-autoload", "cors-origins", "threads-http", "timeout", "to", "timeout-headers",
      "max-headers", "max-body", "max-connections", "no-webui", "stop-timeout"};
  return keys;
}

bool truthy(const std::string& key, const std::string& v) {
  if (v == "true" || v == "1" || v == "on") return true;
  if (v == "false" || v == "0" || v == "off") return false;
  fail("--models-preset: " + key + " must be true or false, got '" + v + "'");
}

// A preset section's keys as command-line arguments, in the file's order.
std::vector<std::string> section_args(const std::string& section, const boost::property_tree::ptree& keys,
                                      const CLI::App& flags, std::vector<std::string>* notes) {
  std::vector<std::string> args;
  for (const auto& [key, value] : keys) {
    const std::string v = value.data();
    if (key == "model" || key == "m" || key == "load-on-startup") continue;  // read by the caller
    if (router_keys().count(key)) {
      if (notes) notes->push_back("--models-preset [" + section + "] " + key + ": dropped (the router's own flag)");
      continue;
    }
    if (key.rfind("LLAMA_ARG_", 0) == 0)
      fail("--models-preset [" + section + "] " + key + ": environment-variable keys are not read; write the flag's name");
    const std::string dashed = key.size() == 1 ? "-" + key : "--" + key;
    const CLI::Option* opt = flags.get_option_no_throw(dashed);
    if (opt == nullptr) {
      // llama.cpp's one-dash spellings (np, ctk, kvu, ngl...): turned into their long forms, or
      // dropped with a note, by llama_cpp_spellings; anything else fails when the model is parsed.
      const std::string one = "-" + key;
      if (v == "true") {
        args.push_back(one);
      } else if (v != "false") {
        args.push_back(one);
        args.push_back(v);
      }
      continue;
    }
    if (opt->get_items_expected_max() == 0) {  // a flag
      if (truthy(key, v)) {
        args.push_back(dashed);
      } else if (flags.get_option_no_throw("--no-" + key)) {
        args.push_back("--no-" + key);
      }
    } else {
      args.push_back(dashed);
      args.push_back(v);
    }
  }
  return args;
}

}  // namespace

std::vector<ModelEntry> find_models(const std::string& dir, const std::string& preset, const CLI::App& flags,
                                    std::vector<std::string>* notes) {
  std::vector<ModelEntry> models = models_in_dir(dir);
  if (!preset.empty()) {
    boost::property_tree::ptree ini;
    try {
      boost::property_tree::read_ini(preset, ini);
    } catch (const boost::property_tree::ini_parser_error& e) {
      fail("--models-preset " + preset + ": " + e.what());
    }
    std::vector<std::string> global;
    for (const auto& [name, node] : ini) {
      if (node.empty()) {  // a key before any section
        if (name != "version")
          fail("--models-preset " + preset + ": '" + name + "' outside a section (only 'version' may be)");
        if (node.data() != "1") fail("--models-preset " + preset + ": version " + node.data() + " (1 is read)");
        continue;
      }
      if (name == "*") global = section_args(name, node, flags, notes);
    }
    for (const auto& [name, node] : ini) {
      if (node.empty() || name == "*") continue;
      auto it = std::find_if(models.begin(), models.end(), [&](const ModelEntry& m) { return m.id == name; });
      std::string path = node.get<std::string>("model", node.get<std::string>("m", ""));
      if (it == models.end()) {
        if (path.empty())
          fail("--models-preset " + preset + ": [" + name + "] is no model of --models-dir and gives no 'model = PATH'");
        models.push_back({name, path, {}, false});
        it = models.end() - 1;
      } else if (!path.empty()) {
        it->path = path;
      }
      it->preset_args = section_args(name, node, flags, notes);
      const std::string on_start = node.get<std::string>("load-on-startup", "false");
      it->load_on_startup = truthy("[" + name + "] load-on-startup", on_start);
    }
    for (ModelEntry& m : models) m.preset_args.insert(m.preset_args.begin(), global.begin(), global.end());
  }
  std::sort(models.begin(), models.end(), [](const ModelEntry& a, const ModelEntry& b) { return a.id < b.id; });
  for (size_t i = 1; i < models.size(); ++i)
    if (models[i].id == models[i - 1].id)
      fail("two models are named '" + models[i].id + "' (" + models[i - 1].path + ", " + models[i].path + ")");
  if (models.empty()) fail("router mode: --models-dir and --models-preset name no model");
  return models;
}

}  // namespace slake::server
