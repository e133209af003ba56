// slake-server's command line: llama-server's flags for the model, the slots and the listening
// socket, plus the shared KV-cache flags (the default policy of every request) and --kv-memory.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "../common/backend.h"
#include "../common/kv_flags.h"
#include "../common/llama_spellings.h"

namespace slake::server {

struct ServerOptions {
  std::string model_path;
  std::string alias;               // the model's id in /v1/models; "" : the model file's name
  std::string chat_template;       // a built-in format's name; "" : the model's own template
  std::string chat_template_file;  // a Jinja template to use instead of the model's
  int n_ctx = 0;                   // tokens of all slots together, as llama-server's -c; 0: the model's training context
  bool kv_unified = false;         // -kvu: each slot may hold all -c tokens, their plans capped together
  int n_parallel = 1;              // slots: requests generated at the same time
  int n_threads = 0;               // 0: all hardware threads
  int n_batch = 256;               // prompt tokens prefilled per chunk between decode steps
  int queue_max = 64;              // requests that may wait for a slot or KV memory; more: 503
  int http_threads = 0;            // 0: slots + queue + 8
  double timeout_headers_s = 10;   // a request's line and headers, and a keep-alive connection's idle time
  double timeout_s = 600;          // a request's body; a reply's write that makes no progress
  int max_headers_kib = 16;        // a request's line and headers together
  int max_body_mib = 64;
  int max_connections = 512;
  double kv_memory_mib = 0;        // KV memory all slots together may plan; 0: no limit
  double cache_ram_mib = 8192;     // the prompt cache (prompt_cache.h), as llama-server's --cache-ram; 0: off, -1: no limit
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // "" : no key needed
  std::string reasoning_format = "auto";  // none, deepseek, auto
  int reasoning_budget = -1;              // -1: no limit; 0: thinking off (enable_thinking = false)
  std::string chat_template_kwargs;       // a JSON object of more template variables
  std::string cors_origins;               // comma-separated origins that may call the API from a browser ("*": any)
  std::string pooling = "mean";           // /v1/embeddings: mean or last
  bool no_webui = false;                  // no chat page at /
  std::string slot_save_path;             // a directory for POST /slots/N?action=save|restore ("": off)
  tools::KvFlags kv;
  std::string backend = "cpu";  // --backend: where the slots run
  // Router mode (no -m; model_router.h, model_catalog.h).
  std::string models_dir;
  std::string models_preset;
  int models_max = 4;            // loaded at once; 0: no limit
  double models_memory_mib = 0;  // weights and caches the loaded models plan together; 0: no limit
  bool models_autoload = true;
};

// The arguments with llama-server's one-dash spellings (-np, -ctk, -ctv) in their long forms, in
// CLI11's order (common/llama_spellings.h).
// Flags of llama-server that change nothing here are dropped and described in `notes`.
std::vector<std::string> llama_cpp_spellings(int argc, char** argv, std::vector<std::string>* notes);
// The tables it uses: one-dash spellings and their long forms, and llama-server's flags ignored here.
const std::map<std::string, std::string>& server_spellings();
const std::vector<tools::IgnoredFlag>& server_ignored_flags();

void add_server_flags(CLI::App& app, ServerOptions& o);

// slake-server's arguments (without the program's name, in command-line order) parsed and checked
// as its command line is. Throws slake::Error.
ServerOptions parse_server_args(const std::vector<std::string>& args, std::vector<std::string>* notes);

// Checks that need no model, after parsing: the KV flags, the ranges. Throws slake::Error.
void check_options(const CLI::App& app, ServerOptions& o);

// The tokens each slot holds. -c is the total, as llama-server reads it (0: the model's training
// context), split evenly over the slots; with --kv-unified each slot may hold all of it. Throws
// slake::Error when a slot would get no token.
int slot_context(const ServerOptions& o, int n_ctx_train);
// --kv-memory in bytes; with --kv-unified and no --kv-memory, the full cache of -c tokens (`full_bytes`).
size_t kv_memory_bytes(const ServerOptions& o, size_t full_bytes);

// "a, b,c" -> {"a", "b", "c"}: a comma-separated flag's items, trimmed, empty ones dropped.
std::vector<std::string> split_list(const std::string& s);

// The model name clients use: --alias, else the file (or directory) name of -m.
std::string model_id(const ServerOptions& o);

}  // namespace slake::server
