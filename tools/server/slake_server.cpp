// slake-server: an OpenAI-compatible HTTP server over one model (or several, in router mode:
// model_router.h), with llama-server's flags. Requests
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

#include "http_server.h"
#include "model_catalog.h"
#include "model_instance.h"
#include "model_router.h"
#include "server_options.h"
#include "slake/error.h"

namespace {

using slake::server::ServerOptions;

int run(const ServerOptions& o, const std::vector<std::string>& args, const sigset_t& stop_signals) {
  // One model (-m), or router mode: the models of --models-dir and --models-preset, loaded on demand.
  std::unique_ptr<slake::server::ModelInstance> single;
  std::unique_ptr<slake::server::ModelRouter> router;
  slake::server::HttpService* service = nullptr;
  std::string what;
  if (!o.model_path.empty()) {
    if (!o.models_dir.empty() || !o.models_preset.empty())
      slake::fail("-m serves one model; --models-dir and --models-preset serve several (router mode): give one or the other");
    single = std::make_unique<slake::server::ModelInstance>(o);
    std::fprintf(stderr, "%s\n", single->describe("slake-server: ").c_str());
    service = &single->service();
    what = "model id '" + single->id() + "'";
  } else {
    CLI::App flags;
    ServerOptions unused;
    slake::server::add_server_flags(flags, unused);
    std::vector<std::string> notes;
    const auto models = slake::server::find_models(o.models_dir, o.models_preset, flags, &notes);
    for (const std::string& n : notes) std::fprintf(stderr, "slake-server: %s\n", n.c_str());
    // What each model is served with: the command line less the router's own flags.
    std::vector<std::string> model_args;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      bool router_flag = false;
      for (const char* f : {"--models-dir", "--models-preset"})
        if (a == f || a.rfind(std::string(f) + "=", 0) == 0) {
          router_flag = true;
          if (a == f) ++i;  // its value
        }
      if (!router_flag) model_args.push_back(a);
    }
    slake::server::RouterConfig rc;
    rc.models_max = o.models_max;
    rc.memory = static_cast<size_t>(o.models_memory_mib * 1048576.0);
    rc.autoload = o.models_autoload;
    rc.api_key = o.api_key;
    rc.cors_origins = slake::server::split_list(o.cors_origins);
    router = std::make_unique<slake::server::ModelRouter>(models, model_args, rc);
    router->load_on_startup();
    service = router.get();
    what = "router mode, " + std::to_string(models.size()) + " models: GET /models";
  }

  slake::server::HttpLimits limits;
  limits.workers = o.http_threads > 0 ? o.http_threads : o.n_parallel + o.queue_max + 8;
  limits.max_head_bytes = static_cast<size_t>(o.max_headers_kib) << 10;
  limits.max_body_bytes = static_cast<size_t>(o.max_body_mib) << 20;
  limits.head_timeout_ms = static_cast<int>(o.timeout_headers_s * 1000);
  limits.body_timeout_ms = limits.write_timeout_ms = static_cast<int>(o.timeout_s * 1000);
  limits.max_connections = o.max_connections;
  slake::server::HttpServer svr(*service, limits);
  const int port = svr.listen(o.host, o.port);
  std::fprintf(stderr, "slake-server: listening on http://%s:%d (%s)\n", o.host.c_str(), port, what.c_str());

  // SIGINT and SIGTERM are blocked in every thread and taken here: requests in flight end, then
  // the server stops listening.
  std::atomic<bool> stopping{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (stopping) return;
    std::fprintf(stderr, "slake-server: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    if (single) single->scheduler().stop();
    if (router) router->stop();
    svr.stop();
  });
  svr.run();
  stopping = true;
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the signal thread if the server ended by itself
  signals.join();
  if (single) single->scheduler().stop();
  if (router) router->stop();
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
    return run(o, std::vector<std::string>(argv + 1, argv + argc), stop_signals);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
