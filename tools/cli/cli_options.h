// slake-cli's command line: llama.cpp's llama-cli flags for generation, sampling and chat, plus
// the shared KV-cache flags.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "slake/sampler.h"
#include "../common/backend.h"
#include "../common/kv_flags.h"
#include "../common/logit_bias.h"

namespace slake::cli {

struct CliOptions {
  std::string model_path;
  std::string prompt, prompt_file;  // at most one of them
  std::string system_prompt;
  std::string chat_template;  // a built-in format's name; "" means the model's own template
  std::string chat_template_file;  // a Jinja template to use instead of the model's
  bool jinja = false;              // the model's own template, with no fall-back to a built-in format
  bool verbose_prompt = false;     // print each prompt's text and tokens on stderr
  int n_predict = -1;         // -1: until end of text or a full context
  int n_ctx = 0;              // 0: the model's training context
  int n_threads = 0;          // 0: all hardware threads
  int64_t seed = -1;          // -1: a random seed, printed
  SamplerParams sampling;
  bool conversation = false;
  bool single_turn = false;         // -st: the chat answers its first message, then ends
  std::vector<std::string> reverse_prompts;  // -r: a reply stops once its text ends with one of these
  std::string system_prompt_file;  // -sysf: the system prompt read from a file
  bool no_display_prompt = false;
  std::string batch_in;         // --batch: JSONL requests ("-": standard input); "" when not in batch mode
  std::string batch_out = "-";  // --batch-out: the responses ("-": standard output)
  tools::KvFlags kv;
  std::string kv_sweep;  // --kv-sweep (batch mode): POLICY/COMPENSATOR/BUDGET settings, each request run in all
  std::string backend = "cpu";  // --backend cpu|cuda
  // The reply's grammar: --grammar GBNF, --grammar-file FILE, --json-schema SCHEMA or
  // --json-schema-file FILE (at most one; "" : none). check_options turns it into GBNF.
  std::string grammar, grammar_file, json_schema, json_schema_file;
  std::string gbnf;  // the grammar to follow, "" : none
  std::vector<std::string> dry_breakers;  // --dry-sequence-breaker (empty: llama.cpp's defaults)
  std::vector<std::string> logit_bias_args;  // -l, --logit-bias TOKEN(+|-)BIAS, as given
  tools::LogitBias logit_bias;               // parsed by check_options; token ids checked once the model loads
  bool ignore_eos = false;                   // --ignore-eos: the end-of-generation tokens banned, as llama.cpp
};

// The arguments with llama.cpp's one-dash spellings (-sys, -cnv, -ctk, -ctv) in their long forms,
// in CLI11's order (common/llama_spellings.h).
// Flags of llama-cli that change nothing here are dropped and described in `notes`.
std::vector<std::string> llama_cpp_spellings(int argc, char** argv, std::vector<std::string>* notes);

void add_cli_flags(CLI::App& app, CliOptions& o);

// Checks that need no model, after parsing: -n, -p/-f, the sampling ranges, the template name, the
// KV flags. Throws slake::Error.
void check_options(const CLI::App& app, CliOptions& o);

// Whether the prompt goes through a chat template: in conversation mode, or when a system prompt
// or a template (name, file or --jinja) is given.
inline bool uses_chat(const CliOptions& o) {
  return o.conversation || !o.system_prompt.empty() || !o.chat_template.empty() || !o.chat_template_file.empty() ||
         o.jinja;
}

}  // namespace slake::cli
