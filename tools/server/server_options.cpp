#include "server_options.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "embeddings.h"
#include "reasoning.h"
#include "slake/chat_template.h"
#include "slake/error.h"
#include "../common/llama_spellings.h"

namespace slake::server {

const std::vector<tools::IgnoredFlag>& server_ignored_flags() {
  static const std::vector<tools::IgnoredFlag> ignored = [] {
    std::vector<tools::IgnoredFlag> v = tools::common_ignored_flags();
    v.push_back({{"--jinja"}, 0, "the model's own Jinja chat template is the default"});
    v.push_back({{"--metrics"}, 0, "GET /metrics is always served"});
    v.push_back({{"-cb", "--cont-batching"}, 0, "batching is always continuous"});
    return v;
  }();
  return ignored;
}

const std::map<std::string, std::string>& server_spellings() {
  static const std::map<std::string, std::string> own = {{"-np", "--parallel"}, {"-to", "--timeout"}, {"-kvu", "--kv-unified"},
                                                         {"-no-kvu", "--no-kv-unified"}, {"-cram", "--cache-ram"},
                                                         {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};
  return own;
}

std::vector<std::string> llama_cpp_spellings(int argc, char** argv, std::vector<std::string>* notes) {
  return tools::llama_cpp_args(argc, argv, server_spellings(), server_ignored_flags(), notes);
}

void add_server_flags(CLI::App& app, ServerOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("-m,--model", o.model_path, "GGUF file or Hugging Face model directory (none: router mode, --models-dir)");
  app.add_option("-a,--alias", o.alias, "the model's names in the API, comma-separated; the first is its id (default: the file name of -m)");
  app.add_option("-c,--ctx-size", o.n_ctx,
                 "context size in tokens of all slots together, split evenly over them as llama-server splits it "
                 "(0: the model's training context)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--kv-unified,!--no-kv-unified", o.kv_unified,
               "each slot may hold all -c tokens; what the slots plan together is capped at the full cache of -c "
               "tokens unless --kv-memory says otherwise (-kvu, -no-kvu)");
  app.add_option("--parallel", o.n_parallel, "slots (-np): requests generated together, one decode step for all")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("-t,--threads", o.n_threads, "threads of the forward pass (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-b,--batch-size", o.n_batch, "prompt tokens prefilled per chunk between decode steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--queue", o.queue_max, "requests that may wait for a slot or for KV memory; beyond: 503")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--threads-http", o.http_threads, "HTTP worker threads, as llama-server (0: slots + queue + 8)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeout-headers", o.timeout_headers_s,
                 "seconds a request's line and headers may take, and a keep-alive connection may idle (408 after)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--timeout", o.timeout_s,
                 "seconds a request's body may take to arrive, and a reply may wait for a client that reads nothing (-to)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--max-headers", o.max_headers_kib, "KiB a request's line and headers may take together (431 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-body", o.max_body_mib, "MiB a request's body may take, chunked or not (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-connections", o.max_connections, "open client connections; more are answered 503 and closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--kv-memory", o.kv_memory_mib,
                 "MiB of KV cache all slots together may plan for (0: no limit); a request that does not fit waits")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cache-ram", o.cache_ram_mib,
                 "MiB of saved prompts (-cram): a slot's state kept when it moves on to an unrelated prompt, for a "
                 "later request sharing its prefix (0: off, -1: no limit); with --kv-memory, counted in it")
      ->capture_default_str()
      ->check(CLI::Range(-1.0, 1e9));
  app.add_option("--slot-save-path", o.slot_save_path,
                 "directory of slot state files: POST /slots/N?action=save|restore|erase, as llama-server's");
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "port to listen on (0: any free port, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' on the API endpoints");
  app.add_flag("--no-webui", o.no_webui, "serve no chat page at /");
  app.add_option("--pooling", o.pooling, "how /v1/embeddings pools a text's final hidden states: mean or last")
      ->capture_default_str();
  app.add_option("--cors-origins", o.cors_origins,
                 "origins whose pages may call the API from a browser, comma-separated ('*': any; default: none)");
  app.add_option("--chat-template", o.chat_template,
                 "a built-in chat format by name instead of the model's own template (" + chat_format_names() +
                     "), or a Jinja template's text");
  app.add_option("--chat-template-file", o.chat_template_file, "a Jinja chat template file instead of the model's own");
  app.add_option("--chat-template-kwargs", o.chat_template_kwargs,
                 "a JSON object of more variables for the Jinja template, e.g. '{\"enable_thinking\": false}'");
  app.add_option("--reasoning-format", o.reasoning_format,
                 "a thinking model's <think> block: deepseek puts it in reasoning_content, none leaves it in content, "
                 "auto (default) is deepseek when the template has <think>")
      ->capture_default_str();
  app.add_option("--reasoning-budget", o.reasoning_budget, "-1: think freely; 0: no thinking (enable_thinking = false)")
      ->capture_default_str();
  app.add_option("--models-dir", o.models_dir,
                 "router mode (no -m): serve the models of this folder, each .gguf file or model folder by its name");
  app.add_option("--models-preset", o.models_preset,
                 "router mode (no -m): an INI file of models and their flags, as llama-server's presets");
  app.add_option("--models-max", o.models_max, "router mode: models loaded at once; the least recently used idle one "
                                               "is unloaded to load another (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--models-memory", o.models_memory_mib,
                 "router mode: MiB the loaded models may plan together (weights, KV caches, prompt caches); idle "
                 "ones are unloaded, least recently used first, to load another (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--models-autoload,!--no-models-autoload", o.models_autoload,
               "router mode: load a model on its first request (default); without, POST /models/load first");
  tools::add_kv_flags(app, o.kv);
  tools::add_backend_flag(app, o.backend);
}

ServerOptions parse_server_args(const std::vector<std::string>& args, std::vector<std::string>* notes) {
  std::vector<std::string> all = {"slake-server"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  CLI::App app;
  ServerOptions o;
  add_server_flags(app, o);
  try {
    std::vector<std::string> parsed = llama_cpp_spellings(static_cast<int>(argv.size()), argv.data(), notes);
    app.parse(parsed);
  } catch (const CLI::ParseError& e) {
    fail(e.what());
  }
  check_options(app, o);
  return o;
}

void check_options(const CLI::App& app, ServerOptions& o) {
  const bool router = !o.models_dir.empty() || !o.models_preset.empty();
  if (o.model_path.empty() && !router)
    fail("give -m MODEL, or --models-dir DIR / --models-preset FILE to serve several models (router mode)");
  tools::finish_kv_flags(app, o.kv);
  tools::check_backend(o.backend);
  tools::kv_types_for_backend(o.kv.params, o.backend);
  const bool inline_jinja = o.chat_template.find("{%") != std::string::npos || o.chat_template.find("{{") != std::string::npos;
  if (!o.chat_template.empty() && !inline_jinja) chat_format_from_name(o.chat_template);  // the error lists the names
  if (!o.chat_template.empty() && !o.chat_template_file.empty())
    fail("--chat-template and --chat-template-file: give one of them");
  reasoning_format_from_name(o.reasoning_format);
  pooling_from_name(o.pooling);
  if (!o.slot_save_path.empty() && !std::filesystem::is_directory(o.slot_save_path))
    fail("--slot-save-path " + o.slot_save_path + ": not a directory");
  if (o.reasoning_budget != -1 && o.reasoning_budget != 0)
    fail("--reasoning-budget must be -1 (no limit) or 0 (no thinking), as llama-server's, got " + std::to_string(o.reasoning_budget));
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (!o.chat_template_kwargs.empty()) {
    kwargs = nlohmann::ordered_json::parse(o.chat_template_kwargs, nullptr, false);
    if (!kwargs.is_object()) fail("--chat-template-kwargs must be a JSON object, got '" + o.chat_template_kwargs + "'");
  }
  if (o.reasoning_budget == 0) kwargs["enable_thinking"] = false;
  o.chat_template_kwargs = kwargs.empty() ? "" : kwargs.dump();
}

int slot_context(const ServerOptions& o, int n_ctx_train) {
  const int total = o.n_ctx > 0 ? o.n_ctx : n_ctx_train;
  const int each = o.kv_unified ? total : total / o.n_parallel;
  if (each < 1)
    fail("-c " + std::to_string(total) + " split over " + std::to_string(o.n_parallel) +
         " slots leaves none a token; raise -c (the total, as in llama-server) or lower -np");
  return each;
}

size_t kv_memory_bytes(const ServerOptions& o, size_t full_bytes) {
  if (o.kv_memory_mib > 0) return static_cast<size_t>(o.kv_memory_mib * 1048576.0);
  return o.kv_unified ? full_bytes : 0;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    std::string item = s.substr(at, comma - at);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    at = comma + 1;
  }
  return out;
}

std::string model_id(const ServerOptions& o) {
  const std::vector<std::string> aliases = split_list(o.alias);
  if (!aliases.empty()) return aliases.front();
  std::string p = o.model_path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace slake::server
