// slake-perplexity: perplexity of a text file in chunks (llama-perplexity's conventions), for any
// KV-cache policy, and with --kl-divergence how far the policy's next-token distributions are from
// the full cache's over the same tokens.
//
// Each chunk of -c tokens starts with BOS. Its first --prefill tokens are one prompt (so prefill
// eviction happens), the rest is decoded one token at a time (so decode eviction happens), and the
// predictions of the decoded tokens are scored: the prediction of token p from the prompt's last
// position, then each decode step's prediction of the next token.
//
// --kv-sweep runs several (policy, compensator, budget) settings over the same chunks in one
// process: the full-cache reference is evaluated once per chunk, on the cpu backend the settings
// share one forward pass of each prompt (prefill_shared), and on either backend they decode
// together (decode_batch, DeviceContext::decode_batch), which reads the weights once per step for
// all of them; both give each setting what it would get alone, so each record is the one its own
// run would print (on a GPU up to the order in which cuBLAS sums a GEMM of several rows).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/logit_stats.h"
#include "slake/format/mapped_file.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"
#include "../common/backend.h"
#include "../common/tool_main.h"
#include "../common/kv_flags.h"
#include "../common/kv_sweep_sessions.h"

namespace {

struct Totals {
  double nll = 0, nll2 = 0;  // sums of the scored tokens' NLL and its square
  int64_t n = 0;
  double full_nll = 0;
  std::vector<double> kl;
  int64_t top1_same = 0;

  // Adds one scored token: its NLL under the policy and, when the reference is given, the full
  // cache's NLL, KL(full || policy) and whether both rank the same token first.
  void score(const float* logits, const float* full, int n_vocab, int32_t next) {
    const double v = slake::token_nll(logits, n_vocab, next);
    nll += v;
    nll2 += v * v;
    ++n;
    if (!full) return;
    full_nll += slake::token_nll(full, n_vocab, next);
    kl.push_back(slake::kl_divergence(full, logits, n_vocab));
    top1_same += slake::argmax(full, n_vocab) == slake::argmax(logits, n_vocab);
  }

  double ppl() const { return std::exp(nll / static_cast<double>(n)); }
  // llama-perplexity's error estimate: the standard error of the mean NLL, carried through exp.
  double ppl_err() const {
    const double mean = nll / static_cast<double>(n), var = nll2 / static_cast<double>(n) - mean * mean;
    return n > 1 ? ppl() * std::sqrt(std::max(0.0, var) / static_cast<double>(n - 1)) : 0.0;
  }
};

// One KV setting under evaluation: its session, the logits of its last step and its totals.
struct Run {
  slake::KvPolicyParams kv;
  slake::tools::Session* session = nullptr;  // owned by the sweep's sessions
  std::vector<float> logits;
  Totals tot;
  size_t kv_bytes_prefill = 0, kv_bytes_end = 0, kv_peak = 0, kv_store_end = 0;
  size_t selector_end = 0;  // the selector's own state at the end (KvEvictor::selector_state_bytes; cpu)
  std::vector<int64_t> layer_budgets;  // the first chunk's, after its prefill
  std::vector<int64_t> kept_positions;  // the first chunk's: prompt tokens kept after prefill, per bin
};

// How many prompt tokens of each of kKeptBins equal stretches of the prompt the global layers'
// KV heads keep after prefill (cpu sessions): where in the prompt a policy keeps its tokens
// (docs/kv-quality.md, positional bias). Empty on other backends.
constexpr int kKeptBins = 32;
std::vector<int64_t> kept_positions(slake::tools::Session& s, int prefill) {
  const slake::Context* ctx = s.cpu_context();
  if (!ctx) return {};
  std::vector<int64_t> bins(kKeptBins, 0);
  const slake::KvCache& kv = ctx->kv_cache();
  for (int l = 0; l < kv.n_layers(); ++l) {
    if (ctx->model().cfg.layer_local(l)) continue;
    for (int h = 0; h < kv.n_kv_heads(); ++h) {
      const slake::KvHead& kh = kv.head(l, h);
      for (int r = 0; r < kh.n; ++r)
        if (kh.pos[static_cast<size_t>(r)] < prefill) ++bins[static_cast<size_t>(int64_t{kh.pos[static_cast<size_t>(r)]} * kKeptBins / prefill)];
    }
  }
  return bins;
}

// The command line.
struct Options {
  std::string model_path, file, format = "text", sweep;
  int n_ctx = 512, n_chunks = -1, n_threads = 0;
  int prefill = -1;  // < 0: half the chunk, set after parsing
  bool kl = false;
  slake::tools::KvFlags kvf;
  std::string backend = "cpu";
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("-m,--model", o.model_path, "GGUF file or Hugging Face model directory")->required();
  app.add_option("-f,--file", o.file, "the text file")->required();
  app.add_option("-c,--ctx-size", o.n_ctx, "tokens per chunk")->capture_default_str()->check(CLI::Range(2, 1 << 24));
  app.add_option("--chunks", o.n_chunks, "chunks to evaluate (-1: all)")->capture_default_str()->check(CLI::Range(-1, 1 << 30));
  app.add_option("--prefill", o.prefill, "tokens of each chunk evaluated as one prompt (default: half the chunk)");
  app.add_option("-t,--threads", o.n_threads, "threads (0: all)")->check(CLI::NonNegativeNumber);
  app.add_flag("--kl-divergence", o.kl, "also run the full cache and report KL(full || policy) and top-1 agreement");
  app.add_option("-o,--output-format", o.format, "text or json (on stdout)")->capture_default_str()->check(CLI::IsMember({"text", "json"}));
  slake::tools::add_kv_flags(app, o.kvf);
  app.add_option("--kv-sweep", o.sweep,
                 "several KV settings in one run, POLICY/COMPENSATOR/BUDGET separated by commas (e.g. "
                 "cake/none/128,cake/taylor/128), each with the other KV flags; they share each prompt's forward pass "
                 "and decode together; json output is then a list of records");
  slake::tools::add_backend_flag(app, o.backend);
}

// The settings to evaluate, checked against the backend: --kv-sweep's, else the one the KV flags give.
std::vector<slake::KvPolicyParams> kv_settings(const Options& o) {
  slake::tools::kv_types_for_backend(o.kvf.params, o.backend);
  return o.sweep.empty() ? std::vector<slake::KvPolicyParams>{o.kvf.params} : slake::tools::parse_kv_sweep(o.sweep, o.kvf.params);
}

// How many whole chunks of `n_tokens` to evaluate: all of them, or --chunks if fewer.
int chunk_count(const Options& o, size_t n_tokens) {
  const int available = static_cast<int>(n_tokens) / o.n_ctx;
  if (available == 0)
    slake::fail(o.file + ": " + std::to_string(n_tokens) + " tokens, fewer than one chunk of " + std::to_string(o.n_ctx));
  return o.n_chunks < 0 ? available : std::min(o.n_chunks, available);
}

// The reference of --kl-divergence: every token, in an f32 cache, on the sweep's thread pool if it has one.
std::unique_ptr<slake::tools::Session> make_reference(const Options& o, const slake::Model& model, slake::ContextParams cp,
                                                      slake::ThreadPool* pool) {
  cp.pool = pool;
  cp.kv = slake::KvPolicyParams{};
  cp.kv.type_k = cp.kv.type_v = slake::KvType::F32;
  return slake::tools::make_session(o.backend, model, cp);
}

// Runs every setting over the chunks of `tokens`, scoring each decoded token (and, with `full`,
// comparing with the reference's prediction of it).
void evaluate(const Options& o, const slake::Model& model, const std::vector<int32_t>& tokens, int chunks,
              slake::tools::SweepSessions& sweep_sessions, std::vector<Run>& runs, slake::tools::Session* full) {
  const int n_ctx = o.n_ctx, prefill = o.prefill, n_vocab = model.cfg.n_vocab;
  std::vector<float> full_logits;
  std::vector<std::vector<float>> step_logits(runs.size());
  std::vector<size_t> all(runs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  for (int c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<int64_t>(c) * n_ctx, tokens.begin() + static_cast<int64_t>(c + 1) * n_ctx);
    if (model.vocab.bos >= 0) chunk[0] = model.vocab.bos;
    const std::vector<int32_t> prompt(chunk.begin(), chunk.begin() + prefill);
    if (full) {  // the reference's logits of the scored positions only (prefill - 1 .. n_ctx - 2)
      full->reset();
      std::vector<float> rest;
      full->eval(prompt, &full_logits);
      if (prefill + 1 < n_ctx) full->eval(std::vector<int32_t>(chunk.begin() + prefill, chunk.end() - 1), &rest, true);
      full_logits.insert(full_logits.end(), rest.begin(), rest.end());
    }
    // On the cpu one forward pass; each setting evicts from it as its own prefill would.
    sweep_sessions.prefill(prompt, &step_logits);
    for (size_t i = 0; i < runs.size(); ++i) runs[i].logits.swap(step_logits[i]);
    for (Run& r : runs) {
      r.kv_bytes_prefill = std::max(r.kv_bytes_prefill, r.session->kv_bytes_used());
      if (c == 0) {
        r.layer_budgets = r.session->layer_budgets();
        if (r.kv.evicts()) r.kept_positions = kept_positions(*r.session, prefill);
      }
    }
    for (int t = prefill; t < n_ctx; ++t) {
      const int32_t next = chunk[static_cast<size_t>(t)];
      const float* f = full ? full_logits.data() + static_cast<size_t>(t - prefill) * n_vocab : nullptr;
      for (Run& r : runs) r.tot.score(r.logits.data(), f, n_vocab, next);
      if (t + 1 == n_ctx) break;
      sweep_sessions.step(all, std::vector<int32_t>(runs.size(), next), &step_logits);
      for (size_t i = 0; i < runs.size(); ++i) runs[i].logits.swap(step_logits[i]);
    }
    for (Run& r : runs) {
      r.kv_bytes_end = std::max(r.kv_bytes_end, r.session->kv_bytes_used());
      r.kv_peak = std::max(r.kv_peak, r.session->kv_peak_bytes());
      r.kv_store_end = std::max(r.kv_store_end, r.session->kv_store_bytes());
      if (const slake::Context* ctx = r.session->cpu_context())
        r.selector_end = std::max(r.selector_end, ctx->evictor().selector_state_bytes());
    }
    std::fprintf(stderr, "[%d]%.4f%s", c + 1, runs[0].tot.ppl(), c + 1 == chunks ? "\n" : ",");
  }
}

// One setting's JSON record; with `kl`, its comparison with the full cache too.
nlohmann::json record(const Options& o, int chunks, const Run& r, bool kl, double secs, size_t n_runs) {
  const slake::KvPolicyParams& kv = r.kv;
  const Totals& tot = r.tot;
  const int n_ctx = o.n_ctx, prefill = o.prefill;
  nlohmann::json j{{"model", o.model_path}, {"file", o.file}, {"n_ctx", n_ctx}, {"n_prefill", prefill}, {"n_decode", n_ctx - prefill},
                   {"chunks", chunks}, {"kv_policy", slake::kv_policy_label(kv)}, {"kv_budget", kv.budget}, {"kv_window", kv.window}, {"kv_observe", kv.observed()},
                   {"kv_compensate", kv.compensator()}, {"cache_type_k", slake::kv_type_name(kv.type_k)},
                   {"cache_type_v", slake::kv_type_name(kv.type_v)}, {"kv_evict_every", kv.evict_every}, {"scored_tokens", tot.n}, {"ppl", tot.ppl()},
                   {"ppl_stderr", tot.ppl_err()}, {"kv_bytes_after_prefill", r.kv_bytes_prefill},
                   {"kv_bytes_end", r.kv_bytes_end}, {"kv_peak_bytes", r.kv_peak}, {"kv_layer_budgets", r.layer_budgets},
                   {"seconds", secs}, {"settings_run_together", n_runs}};
  if (!r.kept_positions.empty()) j["kv_kept_positions"] = r.kept_positions;
  if (r.selector_end > 0) j["kv_selector_state_bytes_end"] = r.selector_end;
  if (kv.recall().on()) {
    j["kv_recall_pages"] = kv.recall_pages;
    j["kv_recall_page"] = kv.recall_page;
    j["kv_store_type"] = slake::kv_type_name(kv.store_type);
    j["kv_recall_score"] = slake::recall_score_name(kv.recall_score);
    j["kv_recall_every"] = kv.recall_every;
    j["kv_store_bytes_end"] = r.kv_store_end;
  }
  if (kl) {
    double mean = 0;
    for (double k : tot.kl) mean += k;
    mean /= static_cast<double>(tot.kl.size());
    j["full_ppl"] = std::exp(tot.full_nll / static_cast<double>(tot.n));
    j["kl_mean"] = mean;
    j["kl_p99"] = slake::percentile(tot.kl, 99.0);
    j["kl_max"] = slake::percentile(tot.kl, 100.0);
    j["top1_agreement"] = static_cast<double>(tot.top1_same) / static_cast<double>(tot.n);
  }
  return j;
}

// The text output of one setting, from its record `j`.
void print_text(const Options& o, int chunks, const Run& r, const nlohmann::json& j, bool kl, double secs) {
  const slake::KvPolicyParams& kv = r.kv;
  const Totals& tot = r.tot;
  const int n_ctx = o.n_ctx, prefill = o.prefill;
  std::printf("policy %s, budget %d, window %d, compensator %s, cache %s/%s; %d chunks x (%d prefilled + %d decoded) tokens\n",
              slake::kv_policy_label(kv).c_str(), kv.budget, kv.window, kv.compensator().c_str(), slake::kv_type_name(kv.type_k),
              slake::kv_type_name(kv.type_v), chunks, prefill, n_ctx - prefill);
  std::printf("Final estimate: PPL = %.4f +/- %.4f over %lld scored tokens\n", tot.ppl(), tot.ppl_err(), static_cast<long long>(tot.n));
  if (kl)
    std::printf("vs full cache (PPL %.4f): mean KL %.6f, p99 KL %.6f, max KL %.6f, top-1 agreement %.2f%%\n",
                j["full_ppl"].get<double>(), j["kl_mean"].get<double>(), j["kl_p99"].get<double>(), j["kl_max"].get<double>(),
                100.0 * j["top1_agreement"].get<double>());
  if (kv.recall().on())
    std::printf("recall store: %d pages of %d tokens a query ranked by %s (chosen every %d decode steps), %s rows, %.3f MiB of "
                "the cache at the end\n",
                kv.recall_pages, kv.recall_page, slake::recall_score_name(kv.recall_score), kv.recall_every,
                slake::kv_type_name(kv.store_type), r.kv_store_end / 1048576.0);
  std::printf("KV cache: %.3f MiB after prefill, %.3f MiB at the end, %.3f MiB peak (%.1f s)\n", r.kv_bytes_prefill / 1048576.0,
              r.kv_bytes_end / 1048576.0, r.kv_peak / 1048576.0, secs);
}

// Every setting's result: as text, one setting after another, or as JSON at the end (one record,
// or with --kv-sweep a list of them).
void report(const Options& o, int chunks, const std::vector<Run>& runs, bool kl, double secs) {
  nlohmann::json records = nlohmann::json::array();
  for (const Run& r : runs) {
    records.push_back(record(o, chunks, r, kl, secs, runs.size()));
    if (o.format != "json") print_text(o, chunks, r, records.back(), kl, secs);
  }
  if (o.format == "json") std::printf("%s\n", (o.sweep.empty() ? records[0] : records).dump(2).c_str());
}

// Everything after parsing; throws slake::Error. Bad settings fail before the model is loaded.
void run(const Options& o) {
  const std::vector<slake::KvPolicyParams> settings = kv_settings(o);
  if (o.prefill < 1 || o.prefill >= o.n_ctx)
    slake::fail("--prefill must be between 1 and the chunk size - 1 (" + std::to_string(o.n_ctx - 1) + "), got " + std::to_string(o.prefill));
  const std::string text = slake::read_text_file(o.file);
  auto model = slake::load_model(o.model_path);
  const slake::Tokenizer tok(model->vocab);
  const std::vector<int32_t> tokens = tok.tokenize(text, true, false);
  const int chunks = chunk_count(o, tokens.size());
  std::fprintf(stderr, "%s: %zu tokens; %d chunks of %d tokens: %d prefilled, %d decoded and scored per chunk\n", o.file.c_str(),
               tokens.size(), chunks, o.n_ctx, o.prefill, o.n_ctx - o.prefill);

  slake::ContextParams cp;
  cp.n_ctx = o.n_ctx;
  cp.n_threads = o.n_threads;
  slake::tools::SweepSessions sweep_sessions(o.backend, *model, cp, settings);
  std::vector<Run> runs(settings.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].kv = sweep_sessions.kv(i);
    runs[i].session = &sweep_sessions.session(i);
  }
  const std::unique_ptr<slake::tools::Session> full = o.kl ? make_reference(o, *model, cp, sweep_sessions.pool()) : nullptr;
  std::fprintf(stderr, "slake-perplexity: %s, %zu KV setting%s\n", runs[0].session->describe().c_str(), runs.size(),
               runs.size() > 1 ? "s decoded together" : "");
  const auto t0 = std::chrono::steady_clock::now();
  evaluate(o, *model, tokens, chunks, sweep_sessions, runs, full.get());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(o, chunks, runs, full != nullptr, secs);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"slake-perplexity: perplexity of a text, and KL divergence of a KV policy against the full cache"};
  Options o;
  add_options(app, o);
  return slake::tools::parse_and_run(app, argc, argv, [&] {
    if (o.prefill < 0) o.prefill = o.n_ctx / 2;
    slake::tools::finish_kv_flags(app, o.kvf);
    run(o);
  });
}
