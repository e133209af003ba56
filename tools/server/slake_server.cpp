// slake-server: an OpenAI-compatible HTTP server over one model, with llama-server's flags. Requests
// are served by slots that decode together in one batched step (scheduler.h); SIGINT and SIGTERM
// stop it cleanly (running requests end with an error, the socket is closed).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <thread>

#include "http_routes.h"
#include "http_server.h"
#include "server_options.h"
#include "slake/error.h"
#include "slake/kv/kv_cache.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"

namespace {

using slake::server::ServerOptions;

int run(const ServerOptions& o, const sigset_t& stop_signals) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto model = slake::load_model(o.model_path);
  const slake::ModelConfig& c = model->cfg;
  std::unique_ptr<slake::Tokenizer> tokenizer;
  try {
    tokenizer = std::make_unique<slake::Tokenizer>(model->vocab);
  } catch (const slake::Error& e) {
    slake::fail(o.model_path + ": " + e.what());
  }
  const slake::server::ChatPrompter chat(*tokenizer, o.chat_template, o.chat_template_file);

  slake::server::SchedulerConfig sc;
  sc.n_slots = o.n_parallel;
  sc.n_ctx = slake::server::slot_context(o, c.n_ctx_train);
  sc.n_batch = o.n_batch;
  sc.queue_max = o.queue_max;
  sc.n_threads = o.n_threads;
  sc.kv = slake::resolve_kv_policy(o.kv.params, false, &c);
  sc.cache_ram = o.cache_ram_mib < 0 ? SIZE_MAX : static_cast<size_t>(o.cache_ram_mib * 1048576.0);
  const int total = o.n_ctx > 0 ? o.n_ctx : c.n_ctx_train;
  sc.kv_memory = slake::server::kv_memory_bytes(
      o, slake::KvCache::planned_bytes(c.n_layers, c.n_kv_heads, c.head_dim, total, sc.kv.type_k, sc.kv.type_v));
  sc.backend = o.backend;
  slake::server::Scheduler scheduler(*model, *tokenizer, sc);
  std::fprintf(stderr,
               "slake-server: %s: %d layers, dim %d, vocab %d, %.1f MiB of weights, loaded in %.0f ms\n"
               "slake-server: %d slots of %d tokens (-c %d %s; full KV cache %.1f MiB each, keys %s, values %s), KV policy %s, "
               "KV memory %s, chat template %s\n",
               o.model_path.c_str(), c.n_layers, c.dim, c.n_vocab, model->weight_bytes() / 1048576.0,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), sc.n_slots,
               sc.n_ctx, total, o.kv_unified ? "unified: each slot may hold it all" : "split evenly", slake::KvCache::planned_bytes(c.n_layers, c.n_kv_heads, c.head_dim, sc.n_ctx, sc.kv.type_k, sc.kv.type_v) / 1048576.0,
               slake::kv_type_name(sc.kv.type_k), slake::kv_type_name(sc.kv.type_v),
               sc.kv.evicts() ? (sc.kv.policy + " budget " + std::to_string(sc.kv.budget)).c_str() : "full",
               sc.kv_memory ? (std::to_string(sc.kv_memory >> 20) + " MiB").c_str() : "no limit", chat.describe().c_str());

  slake::server::HttpCounters counters;
  // The --kv-* flags as given: a request's own policy or budget gets that policy's defaults (its
  // window) from resolve_kv_defaults, not the server default's resolved ones.
  slake::server::ServerEnv env{{slake::server::model_id(o), *tokenizer, chat, c, sc.n_ctx, o.kv.params,
                                slake::server::longest_piece_bytes(tokenizer->vocab()),
                                slake::server::reasoning_format_from_name(o.reasoning_format), o.chat_template_kwargs},
                               scheduler,
                               counters,
                               o.api_key,
                               static_cast<long long>(std::time(nullptr)),
                               o.model_path,
                               slake::server::split_list(o.cors_origins),
                               slake::server::split_list(o.alias)};
  slake::server::Embedder embedder(*model, sc.n_ctx, o.n_threads, slake::server::pooling_from_name(o.pooling));
  env.embedder = &embedder;
  env.webui = !o.no_webui;
  env.slot_save_path = o.slot_save_path;
  slake::server::OpenAiService service(env);
  slake::server::HttpLimits limits;
  limits.workers = o.http_threads > 0 ? o.http_threads : o.n_parallel + o.queue_max + 8;
  limits.max_head_bytes = static_cast<size_t>(o.max_headers_kib) << 10;
  limits.max_body_bytes = static_cast<size_t>(o.max_body_mib) << 20;
  limits.head_timeout_ms = static_cast<int>(o.timeout_headers_s * 1000);
  limits.body_timeout_ms = limits.write_timeout_ms = static_cast<int>(o.timeout_s * 1000);
  limits.max_connections = o.max_connections;
  slake::server::HttpServer svr(service, limits);
  const int port = svr.listen(o.host, o.port);
  std::fprintf(stderr, "slake-server: listening on http://%s:%d (model id '%s')\n", o.host.c_str(), port,
               env.request.model_id.c_str());

  // SIGINT and SIGTERM are blocked in every thread and taken here: requests in flight end, then
  // the server stops listening.
  std::atomic<bool> stopping{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (stopping) return;
    std::fprintf(stderr, "slake-server: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    scheduler.stop();
    svr.stop();
  });
  svr.run();
  stopping = true;
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the signal thread if the server ended by itself
  signals.join();
  scheduler.stop();
  std::fprintf(stderr, "slake-server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not the end of the server

  CLI::App app{"slake-server: an OpenAI-compatible HTTP server with continuous batching", "slake-server"};
  ServerOptions o;
  slake::server::add_server_flags(app, o);
  std::vector<std::string> notes;
  try {
    std::vector<std::string> args = slake::server::llama_cpp_spellings(argc, argv, &notes);
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());
    return 1;
  }
  for (const std::string& n : notes) std::fprintf(stderr, "slake-server: %s\n", n.c_str());
  try {
    slake::server::check_options(app, o);
    return run(o, stop_signals);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
