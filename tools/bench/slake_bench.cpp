// slake-bench: prompt-processing and generation speed, per-token latency and peak memory of the
// engine, in llama-bench's style, for any KV-cache policy; on model files or on synthetic weights
// of real model shapes.
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <random>

#include "bandwidth_probe.h"
#include "bench_record.h"
#include "../common/backend.h"
#include "../common/kv_flags.h"
#include "../common/tool_main.h"
#include "process_memory.h"
#include "slake/context.h"
#include "slake/error.h"
#include "slake/model/model.h"
#include "slake/model/synthetic_model.h"

namespace {

using Clock = std::chrono::steady_clock;
double ns_since(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }

struct LoadedModel {
  std::unique_ptr<slake::Model> model;
  std::string filename, type;
  bool synthetic = false;
  uint64_t n_params = 0;
};

uint64_t count_params(const slake::Model& m) {
  uint64_t n = 0;
  for (const slake::TensorView* t : m.weights()) n += static_cast<uint64_t>(t->n_elements());
  return n;
}

LoadedModel describe(std::unique_ptr<slake::Model> m, const std::string& filename, bool synthetic) {
  LoadedModel lm;
  lm.n_params = count_params(*m);
  char size[32];
  if (lm.n_params >= 1000000000) std::snprintf(size, sizeof size, "%.1fB", lm.n_params / 1e9);
  else std::snprintf(size, sizeof size, "%.1fM", lm.n_params / 1e6);
  lm.type = (m->cfg.name.empty() ? m->cfg.arch : m->cfg.name) + " " + size + " " + slake::dtype_name(m->layers[0].wq.type) +
            (synthetic ? " (synthetic)" : "");
  lm.filename = filename;
  lm.synthetic = synthetic;
  lm.model = std::move(m);
  return lm;
}

// Bytes a decode step reads: every weight once (one embedding row only, unless the output reuses
// the embedding table; of a mixture's experts, the n_expert_used of n_expert a token runs), plus
// the KV cache in use.
double weight_bytes_per_token(const slake::Model& m) {
  double b = static_cast<double>(m.weight_bytes());
  if (!m.cfg.tied_output)
    b -= static_cast<double>(m.tok_embd.nbytes) - static_cast<double>(slake::row_bytes(m.tok_embd.type, m.tok_embd.row_len()));
  if (m.cfg.n_expert > 0) {
    double experts = 0;
    for (const slake::LayerWeights& l : m.layers)
      for (const auto* e : {&l.exp_gate, &l.exp_up, &l.exp_down})
        for (const slake::TensorView& t : *e) experts += static_cast<double>(t.nbytes);
    b -= experts * (1.0 - static_cast<double>(m.cfg.n_expert_used) / m.cfg.n_expert);
  }
  return b;
}

std::string now_iso8601() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

struct TestSpec {
  const LoadedModel* model;
  int threads, n_prompt, n_gen, depth;
  slake::KvPolicyParams kv;
  std::string backend = "cpu";
};

slake::bench::BenchRecord run_test(const TestSpec& t, int reps, bool warmup, double bandwidth_gbps) {
  slake::bench::BenchRecord rec;
  rec.model_filename = t.model->filename;
  rec.model_type = t.model->type;
  rec.model_size = t.model->model->weight_bytes();
  rec.backend = t.backend;
  rec.model_n_params = t.model->n_params;
  rec.synthetic = t.model->synthetic;
  rec.n_threads = t.threads;
  rec.n_prompt = t.n_prompt;
  rec.n_gen = t.n_gen;
  rec.n_depth = t.depth;
  rec.kv_policy = slake::kv_policy_label(t.kv);
  rec.kv_budget = t.kv.budget;
  rec.kv_window = t.kv.window;
  rec.kv_observe = t.kv.observe;
  rec.kv_evict_every = t.kv.evict_every;
  rec.kv_prefill_chunk = t.kv.prefill_chunk;
  rec.kv_recall_pages = t.kv.recall().pages;
  rec.kv_store_type = slake::kv_type_name(t.kv.store_type);
  rec.kv_recall_score = slake::recall_score_name(t.kv.recall_score);
  rec.kv_recall_every = t.kv.recall_every;
  rec.kv_store_file = !t.kv.store_file.empty();
  rec.type_k = slake::kv_type_name(t.kv.type_k);
  rec.type_v = slake::kv_type_name(t.kv.type_v);
  rec.mem_bandwidth_gbps = bandwidth_gbps;
  rec.test_time = now_iso8601();
  const slake::Model& m = *t.model->model;
  slake::ContextParams cp;
  cp.n_ctx = t.depth + t.n_prompt + t.n_gen;
  cp.n_threads = t.threads;
  cp.kv = t.kv;
  double kv_read = 0;
  int64_t kv_read_n = 0;
  for (int r = warmup ? -1 : 0; r < reps; ++r) {  // r = -1: the warm-up, not counted
    ::malloc_trim(0);  // what earlier tests freed leaves the resident set before its peak is reset
    rec.peak_rss_per_test = slake::bench::reset_peak_rss();
    const std::unique_ptr<slake::tools::Session> session = slake::tools::make_session(t.backend, m, cp);
    slake::tools::Session& ctx = *session;  // a fresh context for every measurement
    std::mt19937 rng(static_cast<uint32_t>(1234 + r));
    std::uniform_int_distribution<int32_t> tok(0, m.cfg.n_vocab - 1);
    auto tokens = [&](int n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = tok(rng);
      return v;
    };
    if (t.depth > 0) {  // progress for long runs: a 32K-token depth takes minutes on a CPU
      std::fprintf(stderr, "slake-bench: prefilling a depth of %d tokens (untimed)\n", t.depth);
      const auto t0 = Clock::now();
      ctx.eval(tokens(t.depth), nullptr);
      std::fprintf(stderr, "slake-bench: depth prefilled in %.1f s; timing\n", ns_since(t0) * 1e-9);
    }
    const uint64_t kv_start = ctx.kv_bytes_used();
    rec.kv_layer_budgets = ctx.layer_budgets();
    std::vector<float> logits;
    double total = 0;
    std::vector<double> per_token;
    if (t.n_gen == 0) {
      const std::vector<int32_t> p = tokens(t.n_prompt);
      const auto t0 = Clock::now();
      ctx.eval(p, &logits);
      total = ns_since(t0);
    } else {
      for (int i = 0; i < t.n_gen; ++i) {
        const std::vector<int32_t> one = tokens(1);
        // The store is not read whole: its keys (keys) or summaries (quest) and P pages are; left
        // out, as the extra scoring pass is, so that this stays a lower bound.
        const double kv_now = static_cast<double>(ctx.kv_bytes_used() - ctx.kv_store_bytes());
        const auto t0 = Clock::now();
        ctx.eval(one, &logits);
        const double ns = ns_since(t0);
        per_token.push_back(ns);
        total += ns;
        if (r >= 0) {
          kv_read += (kv_now + static_cast<double>(ctx.kv_bytes_used() - ctx.kv_store_bytes())) / 2;
          ++kv_read_n;
        }
      }
    }
    if (r < 0) continue;
    rec.samples_ns.push_back(total);
    rec.token_ns.insert(rec.token_ns.end(), per_token.begin(), per_token.end());
    rec.kv_bytes_start = kv_start;
    rec.kv_bytes_end = ctx.kv_bytes_used();
    rec.kv_store_bytes_end = ctx.kv_store_bytes();
    rec.kv_peak_bytes = std::max<uint64_t>(rec.kv_peak_bytes, ctx.kv_peak_bytes());
    rec.peak_rss_bytes = std::max<uint64_t>(rec.peak_rss_bytes, slake::bench::peak_rss_bytes());
    rec.peak_device_bytes = std::max<uint64_t>(rec.peak_device_bytes, ctx.peak_device_bytes());
  }
  if (!rec.peak_rss_per_test) {
    static bool warned = false;
    if (!warned) std::fprintf(stderr, "slake-bench: warning: the peak resident set cannot be reset here; peak_rss_bytes is the process's peak so far\n");
    warned = true;
  }
  if (t.n_gen > 0) rec.bytes_per_token = weight_bytes_per_token(m) + (kv_read_n ? kv_read / static_cast<double>(kv_read_n) : 0.0);
  return rec;
}

// The command line. Every list flag takes comma-separated values; the tests are their combinations.
struct Options {
  std::vector<std::string> models, synthetic, policies{"full"}, backends{"cpu"}, types_k{"f16"}, types_v{"f16"};
  std::vector<int> prompts{512}, gens{128}, depths{0}, threads{slake::default_thread_count()}, budgets{0}, evict_every{1}, chunks{0}, recall{0};
  int reps = 5, window = 32, observe = 0;
  uint64_t seed = 42;
  std::string format = "md", synth_type = "q4_0", store_type = "q8_0", recall_score = "keys", store_file;
  int recall_every = 1;
  bool no_warmup = false, beyond_train = false;
  double bandwidth = 0;  // GB/s; <= 0: measured at start
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("-m,--model", o.models, "GGUF file or Hugging Face directory (repeatable, or comma-separated)")->delimiter(',');
  app.add_option("--synthetic", o.synthetic,
                 "random weights of a model's shape: llama-3.1-8b, llama-2-7b, mistral-7b-v0.3, tinyllama-1.1b, qwen2.5-0.5b, "
                 "qwen2.5-1.5b, qwen2.5-7b, qwen3-0.6b, qwen3-8b, qwen3-30b-a3b, mixtral-8x7b, gemma-3-270m, gemma-3-1b, "
                 "gemma-3-4b, gemma-2-2b, phi-3-mini, tiny")
      ->delimiter(',');
  app.add_option("--synthetic-type", o.synth_type, "weight type of synthetic models: f32, f16, bf16, q8_0, q4_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  app.add_option("--seed", o.seed, "seed of the synthetic weights")->capture_default_str();
  app.add_option("-p,--n-prompt", o.prompts, "prompt sizes (prompt-processing tests; 0 skips)")->delimiter(',')->capture_default_str();
  app.add_option("-n,--n-gen", o.gens, "generated tokens (generation tests; 0 skips)")->delimiter(',')->capture_default_str();
  app.add_option("-d,--n-depth", o.depths, "tokens already in the context before the timed part")->delimiter(',')->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads")->delimiter(',')->capture_default_str();
  app.add_option("-r,--repetitions", o.reps, "repetitions of each test")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("-o,--output", o.format, "output format: md, csv, json, jsonl")->capture_default_str()->check(CLI::IsMember({"md", "csv", "json", "jsonl"}));
  app.add_option("--kv-policy", o.policies, "KV-cache policies, as --kv-sweep spells them (cake, ahakv, cake@ahakv, ahakv:recent+value)")->delimiter(',')->capture_default_str();
  app.add_option("--kv-budget", o.budgets, "KV budgets C (0: no eviction)")->delimiter(',')->capture_default_str();
  app.add_option("--kv-window", o.window, "observation window Sw")->capture_default_str();
  app.add_option("--kv-observe", o.observe, "Sobs: the prompt's last queries that score it (0: the window)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-evict-every", o.evict_every, "decode-time eviction in batches of k (1: one token a step, docs/algorithm.md §5.3)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--prefill-chunk", o.chunks, "evicting policies: prompts taken this many tokens at a time (0: one pass)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-recall-pages", o.recall, "evicting policies: recall store pages attended per query (0: none; docs/algorithm.md §9)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-recall-score", o.recall_score, "how a query ranks the recall store's pages: keys, quest, shortlist, lowrank")
      ->capture_default_str()
      ->check(CLI::IsMember(slake::recall_score_names()));
  app.add_option("--kv-recall-every", o.recall_every, "decode steps a choice of recall pages serves (1: every step chooses)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--kv-store-type", o.store_type, "row type of the recall store")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  app.add_option("--kv-store-file", o.store_file, "the recall store's rows in memory-mapped files of this directory")
      ->check(CLI::ExistingDirectory);
  app.add_option("--cache-type-k", o.types_k, "KV cache types for keys (-ctk): f32, f16, bf16, q8_0, q4_0, kivi2, kivi4")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--cache-type-v", o.types_v, "KV cache types for values (-ctv): f32, f16, bf16, q8_0, q4_0, kivi2, kivi4")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--backend", o.backends, "backends: cpu, cuda")->delimiter(',')->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--no-warmup", o.no_warmup, "do not run an uncounted warm-up before each test");
  app.add_flag("--ctx-beyond-train", o.beyond_train,
               "allow contexts past the model's training context (as llama-bench does; e.g. stories260K's 128)");
  app.add_option("--mem-bandwidth", o.bandwidth, "the machine's memory bandwidth in GB/s (default: measured at start)");
}

// The checks CLI11 cannot make on the lists' values.
void check_options(const Options& o) {
  if (o.models.empty() && o.synthetic.empty()) slake::fail("give a model with -m FILE or --synthetic NAME");
  for (int v : o.prompts) if (v < 0) slake::fail("-p: sizes must not be negative");
  for (int v : o.gens) if (v < 0) slake::fail("-n: counts must not be negative");
  for (int v : o.depths) if (v < 0) slake::fail("-d: depths must not be negative");
  for (int v : o.threads) if (v < 1) slake::fail("-t: thread counts must be positive");
  for (int v : o.budgets) if (v < 0) slake::fail("--kv-budget: budgets must not be negative");
}

// The distinct KV settings of the flags' combinations, each resolved and validated. The full
// cache has no budget, eviction batch or prefill chunk: combinations that differ only there are one.
std::vector<slake::KvPolicyParams> kv_settings(const Options& o) {
  std::vector<slake::KvPolicyParams> kvs;
  for (const std::string& p : o.policies)
    for (int b : o.budgets)
      for (int every : o.evict_every)
        for (int chunk : o.chunks)
          for (int recall : o.recall)
          for (const std::string& tk : o.types_k)
            for (const std::string& tv : o.types_v) {
              slake::KvPolicyParams kv = slake::with_policy_label({}, p);
              kv.budget = kv.policy == "full" ? 0 : b;
              kv.window = o.window;
              kv.observe = o.observe;
              kv.evict_every = kv.policy == "full" ? 1 : every;
              kv.prefill_chunk = kv.policy == "full" ? 0 : chunk;
              kv.recall_pages = recall;
              if (!kv.evicts()) kv.recall_pages = 0;  // nothing evicted, nothing to recall
              kv.store_type = slake::parse_kv_type(o.store_type);
              kv.recall_score = slake::parse_recall_score(o.recall_score);
              kv.recall_every = o.recall_every;
              kv.store_file = o.store_file;
              kv.type_k = slake::parse_kv_type(tk);
              kv.type_v = slake::parse_kv_type(tv);
              kv = slake::resolve_kv_policy(kv, false);
              if (std::find(kvs.begin(), kvs.end(), kv) == kvs.end()) kvs.push_back(kv);
            }
  return kvs;
}

slake::DType synthetic_dtype(const std::string& name) {
  return name == "f32" ? slake::DType::F32 : name == "f16" ? slake::DType::F16 : name == "bf16" ? slake::DType::BF16
       : name == "q8_0" ? slake::DType::Q8_0 : slake::DType::Q4_0;
}

// --mem-bandwidth, or the probe's measure with the most threads of -t.
double memory_bandwidth(const Options& o) {
  if (o.bandwidth > 0) return o.bandwidth;
  slake::ThreadPool pool(*std::max_element(o.threads.begin(), o.threads.end()));
  const double bandwidth = slake::bench::measure_read_bandwidth(pool) / 1e9;
  std::fprintf(stderr, "slake-bench: memory read bandwidth %.1f GB/s (probe, %d threads)\n", bandwidth, pool.size());
  return bandwidth;
}

// The -m files, then the --synthetic models.
std::vector<LoadedModel> load_models(const Options& o) {
  const slake::DType stype = synthetic_dtype(o.synth_type);
  std::vector<LoadedModel> loaded;
  for (const std::string& path : o.models) loaded.push_back(describe(slake::load_model(path), path, false));
  for (const std::string& name : o.synthetic) {
    std::fprintf(stderr, "slake-bench: generating synthetic weights for %s (%s)\n", name.c_str(), o.synth_type.c_str());
    loaded.push_back(describe(slake::make_synthetic_model(name, stype, o.seed), "synthetic:" + name, true));
  }
  return loaded;
}

// One test per model, thread count, KV setting, depth, backend and size; a test past a model's
// training context is refused unless --ctx-beyond-train, before any test runs.
std::vector<TestSpec> plan_tests(const Options& o, const std::vector<LoadedModel>& loaded, const std::vector<slake::KvPolicyParams>& kvs) {
  std::vector<TestSpec> tests;
  for (const LoadedModel& m : loaded)
    for (int t : o.threads)
      for (const auto& kv : kvs)
        for (int d : o.depths) {
          for (const std::string& b : o.backends) {
            for (int p : o.prompts) if (p > 0) tests.push_back({&m, t, p, 0, d, kv, b});
            for (int n : o.gens) if (n > 0) tests.push_back({&m, t, 0, n, d, kv, b});
          }
        }
  for (const TestSpec& t : tests) {
    const int need = t.depth + t.n_prompt + t.n_gen, ctx = t.model->model->cfg.n_ctx_train;
    if (ctx > 0 && need > ctx && !o.beyond_train)
      slake::fail(t.model->filename + ": depth " + std::to_string(t.depth) + " + " + std::to_string(t.n_prompt + t.n_gen) +
                  " tokens exceed the model's context of " + std::to_string(ctx) + " (--ctx-beyond-train to run anyway)");
  }
  return tests;
}

// Runs the tests one after another and writes their records: jsonl as each test ends, the other
// formats at the end.
void run_tests(const Options& o, const std::vector<TestSpec>& tests, double bandwidth) {
  std::vector<slake::bench::BenchRecord> records;
  for (size_t i = 0; i < tests.size(); ++i) {
    const TestSpec& t = tests[i];
    std::fprintf(stderr, "slake-bench: [%zu/%zu] %s, %d threads, kv %s %d, %s%s\n", i + 1, tests.size(), t.model->type.c_str(),
                 t.threads, slake::kv_policy_label(t.kv).c_str(), t.kv.budget, t.n_gen ? ("tg" + std::to_string(t.n_gen)).c_str() : ("pp" + std::to_string(t.n_prompt)).c_str(),
                 t.depth ? (" @ d" + std::to_string(t.depth)).c_str() : "");
    records.push_back(run_test(t, o.reps, !o.no_warmup, bandwidth));
    if (o.format == "jsonl") {  // streamed, one record per finished test
      slake::bench::write_records(std::cout, {records.back()}, o.format);
      std::cout.flush();
    }
  }
  if (o.format != "jsonl") slake::bench::write_records(std::cout, records, o.format);
}

// Everything after parsing; throws slake::Error. Bad flags fail before any model is loaded.
void run(const Options& o) {
  check_options(o);
  const std::vector<slake::KvPolicyParams> kvs = kv_settings(o);
  // A cache type a backend lacks is refused here, before any model is loaded or test run.
  for (const std::string& b : o.backends)
    for (const auto& kv : kvs) slake::tools::kv_types_for_backend(kv, b);
  for (const std::string& b : o.backends) slake::tools::check_backend(b);
  const double bandwidth = memory_bandwidth(o);
  const std::vector<LoadedModel> loaded = load_models(o);
  run_tests(o, plan_tests(o, loaded, kvs), bandwidth);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"slake-bench: speed, latency and memory of the engine (llama-bench's conventions)"};
  Options o;
  add_options(app, o);
  return slake::tools::parse_and_run(app, argc, argv, [&] { run(o); });
}
