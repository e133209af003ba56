#include "cli_options.h"

#include <climits>
#include <fstream>
#include <sstream>

#include "slake/chat_template.h"
#include "slake/error.h"
#include "slake/grammar/grammar.h"
#include "slake/kv/kv_policy.h"
#include "../common/llama_spellings.h"

namespace slake::cli {

std::vector<std::string> llama_cpp_spellings(int argc, char** argv, std::vector<std::string>* notes) {
  std::vector<tools::IgnoredFlag> ignored = tools::common_ignored_flags();
  ignored.push_back({{"-no-cnv", "--no-conversation"}, 0, "without -cnv slake-cli generates from the prompt"});
  ignored.push_back({{"-mli", "--multiline-input"}, 0, "each line of standard input is one message"});
  return tools::llama_cpp_args(argc, argv,
                               {{"-sys", "--system-prompt"}, {"-sysf", "--system-prompt-file"}, {"-cnv", "--conversation"},
                                {"-st", "--single-turn"}},
                               ignored, notes);
}

void add_cli_flags(CLI::App& app, CliOptions& o) {
  // A flag given twice takes its last value, as llama.cpp (scripts append overrides to defaults).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("-m,--model", o.model_path, "GGUF file or Hugging Face model directory")->required();
  app.add_option("-p,--prompt", o.prompt, "prompt to start from (default: nothing, i.e. BOS alone)");
  app.add_option("-f,--file", o.prompt_file,
                 "read the prompt from a file (- for standard input; one trailing newline is dropped, as llama.cpp)");
  app.add_option("-n,--n-predict", o.n_predict, "tokens to generate; -1: until end of text or a full context")
      ->capture_default_str();
  app.add_option("-c,--ctx-size", o.n_ctx, "context size in tokens (0: the model's training context)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-t,--threads", o.n_threads, "threads (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-s,--seed", o.seed, "random seed (-1: a random one, printed on stderr)")->capture_default_str();

  SamplerParams& s = o.sampling;
  app.add_option("--temp", s.temp, "temperature; <= 0: greedy (always the most likely token)")->capture_default_str();
  app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0: off)")->capture_default_str();
  app.add_option("--top-p", s.top_p, "keep the most likely tokens up to this total probability, in (0, 1] (1: off)")
      ->capture_default_str();
  app.add_option("--min-p", s.min_p, "drop tokens less likely than this fraction of the best, in [0, 1] (0: off)")
      ->capture_default_str();
  app.add_option("--repeat-penalty", s.repeat_penalty, "penalise repeating the last --repeat-last-n tokens (1: off)")
      ->capture_default_str();
  app.add_option("--repeat-last-n", s.repeat_last_n, "tokens the penalties look back over (0: off, -1: all)")
      ->capture_default_str();
  app.add_option("--typical", s.typical_p, "locally typical sampling, in (0, 1] (1: off)")->capture_default_str();
  app.add_option("--xtc-probability", s.xtc_probability, "chance of excluding the top choices (XTC), in [0, 1] (0: off)")
      ->capture_default_str();
  app.add_option("--xtc-threshold", s.xtc_threshold, "probability a top choice must reach for XTC to exclude it")
      ->capture_default_str();
  app.add_option("--mirostat", s.mirostat, "mirostat: 0 off, 2 mirostat v2 (replaces the samplers above)")->capture_default_str();
  app.add_option("--mirostat-lr", s.mirostat_eta, "mirostat's learning rate (eta)")->capture_default_str();
  app.add_option("--mirostat-ent", s.mirostat_tau, "mirostat's target entropy (tau)")->capture_default_str();
  app.add_option("--dry-multiplier", s.dry_multiplier, "DRY: penalty on extending a repetition (0: off)")->capture_default_str();
  app.add_option("--dry-base", s.dry_base, "DRY: the penalty grows by this factor per token past --dry-allowed-length")
      ->capture_default_str();
  app.add_option("--dry-allowed-length", s.dry_allowed_length, "DRY: repetitions this long go unpenalised")->capture_default_str();
  app.add_option("--dry-penalty-last-n", s.dry_penalty_last_n, "DRY: tokens it looks back over (-1: all, 0: off)")
      ->capture_default_str();
  app.add_option("--dry-sequence-breaker", o.dry_breakers,
                 "DRY: a text that no repetition reaches across (repeatable; default: newline, ':', '\"', '*')");
  app.add_option("--presence-penalty", s.presence_penalty, "subtracted from a token seen in the last --repeat-last-n, in [-2, 2] (0: off)")
      ->capture_default_str();
  app.add_option("--frequency-penalty", s.frequency_penalty, "subtracted per occurrence in the last --repeat-last-n, in [-2, 2] (0: off)")
      ->capture_default_str();
  app.add_option("-l,--logit-bias", o.logit_bias_args,
                 "TOKEN_ID+BIAS or TOKEN_ID-BIAS added to a token's logit (repeatable; -inf or -100 bans it)");
  app.add_flag("--ignore-eos", o.ignore_eos, "never end a reply at an end-of-generation token (-inf on their logits; a reply then runs to -n or a full context)");
  app.add_option("--grammar", o.grammar, "GBNF grammar (llama.cpp's syntax, start rule root) the reply must match");
  app.add_option("--grammar-file", o.grammar_file, "the GBNF grammar read from a file");
  app.add_option("-j,--json-schema", o.json_schema, "a JSON schema the reply must match (converted to a grammar)");
  app.add_option("--json-schema-file", o.json_schema_file, "the JSON schema read from a file");

  app.add_option("--system-prompt", o.system_prompt,
                 "system message for the chat template (-sys as llama.cpp); formats the prompt as a chat");
  app.add_option("--system-prompt-file", o.system_prompt_file, "the system prompt read from a file (-sysf as llama.cpp)");
  app.add_flag("--single-turn", o.single_turn,
               "chat (-st as llama.cpp): answer the first message (-p/-f, else the first line of standard input), then end");
  app.add_flag("--conversation", o.conversation,
               "chat (-cnv as llama.cpp): each line of standard input is a user message, answered in turn with the "
               "chat template; the context is kept between turns; end of input ends the chat. -p/-f, when given, "
               "is the first message. stdout gets the replies only, each ending with a newline. A line ending in \\ "
               "continues on the next; /exit ends the chat, /clear starts a new one, /regen answers the last message again");
  app.add_option("-r,--reverse-prompt", o.reverse_prompts,
                 "stop a reply once its text holds this string (repeatable; the text up to the end of the token that "
                 "completes it is written, as llama.cpp does)");
  app.add_option("--chat-template", o.chat_template,
                 "a built-in chat format instead of the model's own template: " + chat_format_names() +
                     "; formats the prompt as a chat");
  app.add_option("--chat-template-file", o.chat_template_file,
                 "a Jinja chat template file to render instead of the model's own; formats the prompt as a chat");
  app.add_flag("--jinja", o.jinja,
               "render the model's own Jinja chat template (the default when the model has one; with this flag a "
               "template that fails is an error instead of falling back to the built-in format it resembles)");
  app.add_flag("--verbose-prompt", o.verbose_prompt, "print each prompt's text and token ids on stderr");
  app.add_flag("--no-display-prompt", o.no_display_prompt, "do not echo the prompt on stdout");
  app.add_option("--batch", o.batch_in,
                 "batch mode: each line of this file (- for standard input) is a JSON request {\"id\", \"prompt\", "
                 "\"max_new_tokens\", \"min_new_tokens\", \"chat\", \"stop\", \"truncate_tokens\", \"echo_prompt\"}, "
                 "run in a fresh context with greedy decoding and answered by one JSON line (tools/cli/batch_mode.h); "
                 "the model is loaded once");
  app.add_option("--batch-out", o.batch_out, "where batch mode writes its responses (- for standard output)")
      ->capture_default_str();
  tools::add_kv_flags(app, o.kv);
  app.add_option("--kv-sweep", o.kv_sweep,
                 "batch mode: run every request under several KV settings, POLICY/COMPENSATOR/BUDGET separated by "
                 "commas (e.g. cake/none/256,slake/auto/256), with the decodes stepped together (and on the cpu one "
                 "forward pass of the prompt); one response line per setting, with a \"kv\" field");
  tools::add_backend_flag(app, o.backend);
  app.footer(
      "Sampling follows llama.cpp: repeat penalty, top-k, top-p, min-p, then temperature and a seeded draw.\n"
      "Generated text goes to stdout (after the prompt, unless --no-display-prompt); load information and, at the "
      "end, prompt and generation speed and the KV cache's size go to stderr.");
}

void check_options(const CLI::App& app, CliOptions& o) {
  if (o.n_predict < -1)
    fail("-n must be -1 (until end of text or a full context) or a count >= 0, got " + std::to_string(o.n_predict));
  if (o.seed < -1) fail("--seed must be -1 (random) or >= 0, got " + std::to_string(o.seed));
  if (app.count("--prompt") && app.count("--file")) fail("give the prompt with -p TEXT or -f FILE, not both");
  if (app.count("--system-prompt") && app.count("--system-prompt-file"))
    fail("give the system prompt with -sys TEXT or -sysf FILE, not both");
  if (o.single_turn) o.conversation = true;  // as llama.cpp: a single turn is a conversation of one
  if (o.conversation && o.prompt_file == "-")
    fail("-f - reads standard input, which --conversation reads for the chat");
  if (!o.batch_in.empty()) {
    if (app.count("--prompt") || app.count("--file") || o.conversation)
      fail("--batch takes its prompts from the requests; it cannot be combined with -p, -f or -cnv");
    if (o.sampling.temp > 0 && app.count("--temp"))
      fail("--batch decodes greedily; --temp must be <= 0 there, got " + std::to_string(o.sampling.temp));
  } else if (app.count("--batch-out")) {
    fail("--batch-out needs --batch");
  }
  if (!o.kv_sweep.empty() && o.batch_in.empty()) fail("--kv-sweep needs --batch");
  validate(o.sampling);
  const int grammars = !o.grammar.empty() + !o.grammar_file.empty() + !o.json_schema.empty() + !o.json_schema_file.empty();
  if (grammars > 1) fail("give one of --grammar, --grammar-file, --json-schema and --json-schema-file");
  if (grammars && !o.batch_in.empty()) fail("--batch does not take a grammar; give it to the single prompt or the chat");
  o.logit_bias.clear();
  for (const std::string& b : o.logit_bias_args) o.logit_bias.push_back(tools::parse_logit_bias(b));
  if (!o.logit_bias.empty() && !o.batch_in.empty()) fail("--batch decodes greedily; it does not take --logit-bias");
  if (o.ignore_eos && !o.batch_in.empty()) fail("--batch decodes greedily; it does not take --ignore-eos");
  const auto read = [](const std::string& path, const char* flag) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(std::string(flag) + ": cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (!o.grammar.empty()) o.gbnf = o.grammar;
  if (!o.grammar_file.empty()) o.gbnf = read(o.grammar_file, "--grammar-file");
  if (!o.json_schema.empty()) o.gbnf = json_schema_to_gbnf(o.json_schema);
  if (!o.json_schema_file.empty()) o.gbnf = json_schema_to_gbnf(read(o.json_schema_file, "--json-schema-file"));
  if (!o.gbnf.empty()) Grammar::parse(o.gbnf);  // its errors before the model loads
  if (!o.chat_template.empty()) chat_format_from_name(o.chat_template);
  if (!o.chat_template.empty() && !o.chat_template_file.empty())
    fail("give --chat-template NAME or --chat-template-file FILE, not both");
  if (o.jinja && !o.chat_template.empty())
    fail("--jinja renders a Jinja template (the model's, or --chat-template-file's); --chat-template names a built-in "
         "format: give one of them");
  tools::finish_kv_flags(app, o.kv);
  tools::kv_types_for_backend(o.kv.params, o.backend);
  if (!o.kv_sweep.empty()) tools::parse_kv_sweep(o.kv_sweep, o.kv.params);  // a bad setting fails here
}

}  // namespace slake::cli
