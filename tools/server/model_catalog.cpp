#include "model_catalog.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <boost/property_tree/ini_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <filesystem>
#include <set>

#include "server_options.h"
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

// The model a folder of --models-dir holds: itself (Hugging Face) or its one .gguf file; "" when
// it holds none. Throws for several files (split GGUF files are not read).
std::string model_in_folder(const fs::path& dir) {
  if (fs::exists(dir / "config.json")) return dir.string();
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file() && is_model_file(f.path())) files.push_back(f.path().string());
  if (files.size() > 1)
    fail(dir.string() + " holds " + std::to_string(files.size()) +
         " .gguf files: a folder of --models-dir holds one model in one file (split GGUF files are not read)");
  return files.empty() ? "" : files.front();
}

std::vector<ModelEntry> models_in_dir(const std::string& dir, std::vector<std::string>* notes) {
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
      std::string p;
      try {
        p = model_in_folder(e.path());
      } catch (const Error& err) {
        if (notes) notes->push_back(std::string("--models-dir: skipped ") + err.what());
      }
      if (!p.empty()) out.push_back({name, p, {}, false});
    }
  }
  return out;
}

// Flags that belong to the router, not to one model (their long names).
const std::set<std::string>& router_flags() {
  static const std::set<std::string> names = {
      "host", "port", "api-key", "alias", "models-dir", "models-preset", "models-max", "models-memory", "models-autoload",
      "no-models-autoload", "cors-origins", "threads-http", "timeout", "timeout-headers", "max-headers", "max-body",
      "max-connections", "no-webui"};
  return names;
}

bool truthy(const std::string& where, const std::string& v) {
  if (v == "true" || v == "1" || v == "on") return true;
  if (v == "false" || v == "0" || v == "off") return false;
  fail("--models-preset " + where + " must be true or false, got '" + v + "'");
}

// One preset key as arguments, with what identifies its flag (so that a model's section replaces
// what [*] set for the same flag, whichever spelling each used); `flag` null: a key that is not
// passed on (the router's own, dropped with a note).
struct PresetArg {
  const void* flag = nullptr;
  std::vector<std::string> args;
};

// llama.cpp's environment-variable name of a flag (LLAMA_ARG_CACHE_RAM) as the flag's long name
// (cache-ram): lower case with dashes, but for the few whose names differ (common/arg.cpp).
std::string flag_of_env_name(const std::string& env) {
  static const std::map<std::string, std::string> differ = {
      {"N_PARALLEL", "parallel"}, {"BATCH", "batch-size"}, {"UBATCH", "ubatch-size"}, {"ENDPOINT_METRICS", "metrics"},
      {"THINK", "reasoning-format"}, {"THINK_BUDGET", "reasoning-budget"}};
  const std::string rest = env.substr(10);
  if (const auto it = differ.find(rest); it != differ.end()) return it->second;
  std::string flag;
  for (char c : rest) flag += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return flag;
}

PresetArg preset_arg(const std::string& section, const std::string& given, const std::string& v, const CLI::App& flags,
                     std::vector<std::string>* notes) {
  const std::string where = "[" + section + "] " + given;
  // A key may be a flag's long name, its short form, or llama.cpp's environment-variable name.
  const std::string key = given.rfind("LLAMA_ARG_", 0) == 0 && given.size() > 10 ? flag_of_env_name(given) : given;
  // The long form the key names: itself, its one-letter form, or llama.cpp's one-dash spelling.
  std::string name = key.size() == 1 ? "-" + key : "--" + key;
  const auto& spelled = server_spellings();
  if (const auto it = spelled.find("-" + key); it != spelled.end()) name = it->second;
  if (const CLI::Option* opt = flags.get_option_no_throw(name)) {
    for (const std::string& l : opt->get_lnames())
      if (router_flags().count(l)) {
        if (notes) notes->push_back("--models-preset " + where + ": dropped (the router's own flag)");
        return {};
      }
    if (opt->get_items_expected_max() > 0) return {opt, {name, v}};
    if (truthy(where, v)) return {opt, {name}};
    // false: the flag's negation where it has one (--no-kv-unified), else nothing.
    const std::string base = name.substr(name.find_first_not_of('-'));
    const std::string no = base.rfind("no-", 0) == 0 ? "--" + base.substr(3) : "--no-" + base;
    return {opt, flags.get_option_no_throw(no) == opt ? std::vector<std::string>{no} : std::vector<std::string>{}};
  }
  for (const tools::IgnoredFlag& f : server_ignored_flags())
    for (const std::string& n : f.names)
      if (n == "--" + key || n == "-" + key) {
        if (f.values > 0) return {&f, {n, v}};
        return {&f, truthy(where, v) ? std::vector<std::string>{n} : std::vector<std::string>{}};
      }
  fail("--models-preset " + where + ": no flag of slake-server is named so (see slake-server --help)");
}

std::vector<PresetArg> section_args(const std::string& section, const boost::property_tree::ptree& keys, const CLI::App& flags,
                                    std::vector<std::string>* notes) {
  std::vector<PresetArg> out;
  for (const auto& [key, value] : keys) {
    if (key == "model" || key == "m" || key == "load-on-startup") continue;  // read by the caller
    if (key == "LLAMA_ARG_MODEL") fail("--models-preset [" + section + "] LLAMA_ARG_MODEL: write the path as model = PATH");
    if (key == "stop-timeout") {
      if (notes) notes->push_back("--models-preset [" + section + "] stop-timeout: dropped (models run in this process)");
      continue;
    }
    PresetArg a = preset_arg(section, key, value.data(), flags, notes);
    if (a.flag) out.push_back(std::move(a));
  }
  return out;
}

// [*]'s flags, those of the model's section replacing them flag by flag, as arguments.
std::vector<std::string> merged(const std::vector<PresetArg>& global, const std::vector<PresetArg>& own) {
  std::vector<std::string> args;
  for (const PresetArg& g : global)
    if (std::none_of(own.begin(), own.end(), [&](const PresetArg& o) { return o.flag == g.flag; }))
      args.insert(args.end(), g.args.begin(), g.args.end());
  for (const PresetArg& o : own) args.insert(args.end(), o.args.begin(), o.args.end());
  return args;
}

}  // namespace

std::vector<ModelEntry> find_models(const std::string& dir, const std::string& preset, const CLI::App& flags,
                                    std::vector<std::string>* notes) {
  std::vector<ModelEntry> models = models_in_dir(dir, notes);
  if (!preset.empty()) {
    boost::property_tree::ptree ini;
    try {
      boost::property_tree::read_ini(preset, ini);
    } catch (const boost::property_tree::ini_parser_error& e) {
      fail("--models-preset " + preset + ": " + e.what());
    }
    std::vector<PresetArg> global;
    std::vector<std::vector<PresetArg>> own(models.size());
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
      own.resize(models.size());
      own[static_cast<size_t>(it - models.begin())] = section_args(name, node, flags, notes);
      const std::string on_start = node.get<std::string>("load-on-startup", "false");
      it->load_on_startup = truthy("[" + name + "] load-on-startup", on_start);
    }
    own.resize(models.size());
    for (size_t i = 0; i < models.size(); ++i) models[i].preset_args = merged(global, own[i]);
  }
  std::sort(models.begin(), models.end(), [](const ModelEntry& a, const ModelEntry& b) { return a.id < b.id; });
  for (size_t i = 1; i < models.size(); ++i)
    if (models[i].id == models[i - 1].id)
      fail("two models are named '" + models[i].id + "' (" + models[i - 1].path + ", " + models[i].path + ")");
  if (models.empty()) fail("router mode: --models-dir and --models-preset name no model");
  return models;
}

}  // namespace slake::server
