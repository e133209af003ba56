// slake-cli: text generation and chat from a GGUF file or a Hugging Face directory, with
// llama.cpp's llama-cli flags.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/format/mapped_file.h"
#include "slake/model/model.h"
#include "slake/sampler.h"
#include "slake/tokenizer/tokenizer.h"
#include "../common/dry_breakers.h"
#include "batch_mode.h"
#include "chat_session.h"
#include "cli_options.h"
#include "generator.h"

namespace {

using slake::cli::CliOptions;

std::string read_prompt_file(const std::string& file) {
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (std::cin.bad()) slake::fail("standard input: read error");
  } else {
    text = slake::read_text_file(file);
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama.cpp's -f
  return text;
}

void require_utf8(const std::string& text, const std::string& what) {
  const size_t bad = slake::find_invalid_utf8(text);
  if (bad != std::string::npos)
    slake::fail(what + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " + std::to_string(text.size()) + ")");
}

// -s, or a random seed that is printed (when sampling) so that the run can be repeated with -s.
uint64_t choose_seed(int64_t seed, bool greedy) {
  if (seed >= 0) return static_cast<uint64_t>(seed);
  std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32 | rd()) & 0x7FFFFFFFFFFFFFFFull;  // fits -s
  if (!greedy) std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(s));
  return s;
}

void report(const slake::cli::Generator& gen, const slake::tools::Session& ctx) {
  auto rate = [](int n, double s) { return s > 0 ? n / s : 0.0; };
  const slake::ModelConfig& c = ctx.model().cfg;
  std::fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tokens/s)\n", gen.prompt_tokens(), gen.prompt_seconds(),
               rate(gen.prompt_tokens(), gen.prompt_seconds()));
  std::fprintf(stderr, "generation: %d tokens in %.3f s (%.1f tokens/s)\n", gen.generated_tokens(),
               gen.generation_seconds(), rate(gen.generated_tokens(), gen.generation_seconds()));
  std::fprintf(stderr, "KV cache: %.2f MiB in use (%lld tokens held over %d layers x %d KV heads)\n",
               ctx.kv_bytes_used() / 1048576.0, static_cast<long long>(ctx.tokens_held()),
               c.n_layers, c.n_kv_heads);
}

// One user message and the reply, on stdout followed by a newline. False when the context is full.
// --verbose-prompt: what a turn feeds, as text and token ids.
void show_prompt(const CliOptions& o, const std::string& text, const std::vector<int32_t>& tokens) {
  if (!o.verbose_prompt) return;
  std::fprintf(stderr, "prompt text: %s\n", nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::string ids;
  for (int32_t t : tokens) ids += (ids.empty() ? "" : " ") + std::to_string(t);
  std::fprintf(stderr, "prompt tokens: %s\n", ids.c_str());
}

bool chat_turn(slake::cli::ChatSession& session, slake::cli::Generator& gen, const CliOptions& o,
               const std::string& message) {
  const std::vector<int32_t> tokens = session.user_turn(message);
  if (!session.last_warning().empty()) std::fprintf(stderr, "warning: %s\n", session.last_warning().c_str());
  show_prompt(o, session.last_turn_text(), tokens);
  gen.feed(tokens, "the conversation");
  const slake::cli::Reply r = gen.generate(o.n_predict);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  session.assistant_reply(r.text);
  if (r.ctx_full) {
    std::fprintf(stderr, "the context is full (-c %d); the chat ends here\n", o.n_ctx);
    if (!o.kv.params.evicts())
      std::fputs("  the full KV cache keeps every token: an evicting policy holds a long chat in a fixed cache\n"
                 "  (--kv-policy slake --kv-budget 512, with a larger -c for the positions)\n", stderr);
    else
      std::fputs("  the cache evicts, but every token still takes a position: a larger -c goes further\n", stderr);
  }
  return !r.ctx_full;
}

// The prompt (when given) is the first user message, then each non-empty line of standard input (a
// line ending in a backslash continues on the next, as in llama-cli); end of input ends the chat.
// Commands: /exit ends it, /clear starts a new conversation, /regen answers the last message again
// (the context is emptied and the conversation before it prefilled anew).
void chat(slake::cli::ChatSession& session, slake::cli::Generator& gen, const CliOptions& o, const std::string& first) {
  if (!first.empty() && (!chat_turn(session, gen, o, first) || o.single_turn)) return;
  const bool tty = ::isatty(STDIN_FILENO);
  std::string line, message;
  for (int line_no = 1;; ++line_no) {
    if (tty) std::fputs(message.empty() ? "> " : "... ", stderr);
    if (!std::getline(std::cin, line)) {  // end of input; a message still being continued is answered
      if (!message.empty()) chat_turn(session, gen, o, message);
      return;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    require_utf8(line, "input line " + std::to_string(line_no));
    if (!line.empty() && line.back() == '\\') {
      message += line.substr(0, line.size() - 1) + "\n";
      continue;
    }
    message += line;
    const std::string m = std::move(message);
    message.clear();
    if (m.empty()) continue;
    if (m == "/exit") return;
    if (m == "/clear") {
      session.clear();
      gen.reset();
      std::fputs("slake-cli: a new conversation\n", stderr);
      continue;
    }
    std::string ask = m;
    if (m == "/regen") {
      try {
        ask = session.rewind();
      } catch (const slake::Error& e) {
        std::fprintf(stderr, "slake-cli: /regen: %s\n", e.what());
        continue;
      }
      gen.reset();
    }
    if (!chat_turn(session, gen, o, ask) || o.single_turn) return;
  }
}

int run(CliOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) prompt = read_prompt_file(o.prompt_file);
  if (!o.system_prompt_file.empty()) o.system_prompt = read_prompt_file(o.system_prompt_file);
  require_utf8(prompt, "the prompt");
  require_utf8(o.system_prompt, "the system prompt");

  auto t0 = std::chrono::steady_clock::now();
  auto model = slake::load_model(o.model_path);
  const slake::ModelConfig& c = model->cfg;
  std::fprintf(stderr, "loaded %s (%s): %d layers, dim %d, %d heads (%d KV), vocab %d, %.1f MiB of weights in %.0f ms\n",
               o.model_path.c_str(), model->format.c_str(), c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.n_vocab,
               model->weight_bytes() / 1048576.0,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  std::unique_ptr<slake::Tokenizer> tokenizer;
  try {
    tokenizer = std::make_unique<slake::Tokenizer>(model->vocab);
  } catch (const slake::Error& e) {
    slake::fail(o.model_path + ": " + e.what());
  }
  const bool chat_mode = slake::cli::uses_chat(o);
  std::unique_ptr<slake::cli::ChatSession> session;
  if (chat_mode) {
    std::string note;
    slake::ChatTemplate t = slake::cli::choose_chat_template(o, model->vocab, &note);
    if (!note.empty()) std::fprintf(stderr, "chat template: %s\n", note.c_str());
    std::fprintf(stderr, "chat template: %s\n", t.describe().c_str());
    session = std::make_unique<slake::cli::ChatSession>(std::move(t), *tokenizer, o.system_prompt);
  }

  slake::ContextParams cp;
  cp.n_ctx = o.n_ctx;
  cp.n_threads = o.n_threads;
  cp.kv = o.kv.params;
  if (!o.batch_in.empty()) {  // every request under one KV setting, or under each of --kv-sweep's
    const std::vector<slake::KvPolicyParams> kvs =
        o.kv_sweep.empty() ? std::vector<slake::KvPolicyParams>{o.kv.params} : slake::tools::parse_kv_sweep(o.kv_sweep, o.kv.params);
    slake::tools::SweepSessions sessions(o.backend, *model, cp, kvs);
    if (o.backend != "cpu") std::fprintf(stderr, "slake-cli: %s\n", sessions.session(0).describe().c_str());
    o.n_ctx = sessions.session(0).n_ctx();
    return slake::cli::run_batch(o, *tokenizer, sessions);
  }
  const std::unique_ptr<slake::tools::Session> ctx_owner = slake::tools::make_session(o.backend, *model, cp);
  slake::tools::Session& ctx = *ctx_owner;
  if (o.backend != "cpu") std::fprintf(stderr, "slake-cli: %s\n", ctx.describe().c_str());
  o.n_ctx = ctx.n_ctx();
  o.sampling.seed = choose_seed(o.seed, o.sampling.temp <= 0);
  slake::Sampler sampler(o.sampling);
  if (o.sampling.dry_multiplier > 0.0f)
    sampler.set_dry_breakers(slake::tools::dry_breaker_tokens(
        *tokenizer, o.dry_breakers.empty() ? slake::tools::default_dry_breakers() : o.dry_breakers));
  slake::cli::Generator gen(ctx, *tokenizer, sampler, stdout);
  if (!o.gbnf.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    auto grammar = slake::Grammar::parse(o.gbnf);
    const double parse_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "slake-cli: grammar of %zu rules and %zu elements, parsed and checked in %.2f ms\n",
                 grammar->rules.size(), grammar->elements.size(), parse_ms);
    gen.set_grammar(std::move(grammar));
  }
  gen.set_stops(o.reverse_prompts);
  for (const auto& [t, b] : o.logit_bias)
    if (t >= model->cfg.n_vocab)
      slake::fail("--logit-bias: token " + std::to_string(t) + " is outside the vocabulary of " +
                  std::to_string(model->cfg.n_vocab) + " tokens");
  gen.set_logit_bias(o.logit_bias);
  gen.set_ignore_eos(o.ignore_eos);

  if (o.conversation) {
    chat(*session, gen, o, prompt);
  } else {
    // Special-token text in a plain prompt becomes those tokens, as llama-cli does.
    const std::vector<int32_t> tokens = session ? session->user_turn(prompt)
                                                : tokenizer->tokenize(prompt, model->vocab.add_bos, true);
    show_prompt(o, session ? session->last_turn_text() : prompt, tokens);
    if (tokens.empty()) slake::fail("the prompt is empty and the vocabulary adds no BOS: nothing to generate from");
    gen.feed(tokens, "the prompt");
    if (!o.no_display_prompt) gen.echo(tokens);
    gen.generate(o.n_predict);
    std::fputs("\n", stdout);
  }
  std::fflush(stdout);
  report(gen, ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"slake-cli: generate text, or chat, with a Llama-family model", "slake-cli"};
  CliOptions o;
  slake::cli::add_cli_flags(app, o);
  std::vector<std::string> notes;
  try {
    std::vector<std::string> args = slake::cli::llama_cpp_spellings(argc, argv, &notes);
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());
    return 1;
  }
  for (const std::string& n : notes) std::fprintf(stderr, "slake-cli: %s\n", n.c_str());
  try {
    slake::cli::check_options(app, o);  // bad flags fail before a large model is mapped
    return run(o);
  } catch (const slake::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // out of memory and the like: still a message, not an abort
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
