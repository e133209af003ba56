// The KV-cache flags shared by slake-cli, slake-perplexity and slake-server (slake-bench takes lists).
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "slake/error.h"
#include "slake/kv/kv_policy.h"
#include "slake/kv/store_memory.h"

namespace slake::tools {

struct KvFlags {
  KvPolicyParams params;
  std::string cache_type_k, cache_type_v;  // empty: the default, f16
  std::string store_type;                  // empty: the default, q8_0
  std::string recall_score;                // empty: the default, keys
  std::string aha_parts;                   // empty: the default, gain+recent+value
  double tau1 = 0, tau2 = 0, alpha = 0, beta = 0;  // copied into params only when given
};

inline void add_kv_flags(CLI::App& app, KvFlags& f) {
  KvPolicyParams& kv = f.params;
  app.add_option("--kv-policy", kv.policy,
                 "KV-cache policy: " + join_names(kv_policy_names()) + " (default: slake when --kv-budget is given, else full)");
  app.add_option("--kv-budget", kv.budget, "C: average tokens kept per layer, window included (0: keep all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-window", kv.window, "observation window Sw (the last Sw tokens are always kept)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-observe", kv.observe,
                 "Sobs: how many of the prompt's last queries score its tokens at prefill (0: the whole window)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-selector", kv.selector,
                 "token scores: auto (the policy's own), ahakv (AhaKV's) or sre (the compensator's self-recall error), with "
                 "the policy's layer budgets and compensator")
      ->capture_default_str()
      ->check(CLI::IsMember(kv_selector_names()));
  app.add_option("--kv-ahakv", f.aha_parts,
                 "the parts of AhaKV's scores (policy or selector ahakv), '+'-joined: gain (step-gain softmax), recent "
                 "(the last Sobs queries only), value (value-norm prior); or none (default: gain+recent+value)");
  app.add_option("--kv-sre-mass", kv.sre_mass,
                 "SRE-mass sizing: rank by the compensator's self-recall error and keep, per KV head, the fewest tokens "
                 "whose errors sum to this share of the total, at most --kv-budget (0: off; a compensated policy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--kv-sre-floor", kv.sre_floor, "SRE-mass: the fewest prefix tokens a KV head keeps")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-compensate", kv.compensate,
                 "evicted tokens: taylor (linear cache + PTAA), centroids (merged into --kv-centroids mean "
                 "tokens per head), none (dropped), auto (taylor for slake only)")
      ->capture_default_str()
      ->check(CLI::IsMember(kv_compensator_names()));
  app.add_option("--kv-centroids", kv.centroids, "centroids per layer and KV head of --kv-compensate centroids")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--kv-gamma", kv.gamma, "indicator variance weight gamma")->capture_default_str();
  app.add_option("--kv-tau1", f.tau1, "CAKE preference exponent 1/tau1 (default: per model and budget)");
  app.add_option("--kv-tau2", f.tau2, "CAKE preference exponent 1/tau2 (default: per model and budget)");
  app.add_option("--kv-alpha", f.alpha, "VABS preference exponent alpha (default: per model and budget)");
  app.add_option("--kv-beta", f.beta, "VABS preference exponent beta (default: per model and budget)");
  app.add_option("--kv-delta", kv.delta, "slake-wide: exponent of the attention variance in its layer preference")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-evict-every", kv.evict_every,
                 "decode-time eviction in batches: a head grows to its budget + window + k - 1 tokens, then gives up k "
                 "chosen by one scoring (1: one token per step, as in docs/algorithm.md §5.3)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--prefill-chunk", kv.prefill_chunk,
                 "evicting policies: take a long prompt N tokens at a time, each chunk attending to what the chunks before "
                 "it kept and evicting before the next (0: the whole prompt at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-recall-pages", kv.recall_pages,
                 "recall store: keep evicted tokens in pages and attend the P pages of highest score (--kv-recall-score) per "
                 "query and KV head with the exact cache (0: evicted tokens are dropped or summarised; docs/algorithm.md §9)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-recall-page", kv.recall_page, "tokens in a page of the recall store")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--kv-recall-score", f.recall_score,
                 "how a query ranks the store's pages: keys (the largest score of their keys, every stored key read), "
                 "quest (the bound of their per-channel key min/max, only those read), shortlist (the 4 P pages of "
                 "highest bound re-ranked by their keys) or lowrank (the 4 P pages whose keys score highest in d/4 "
                 "int8 coordinates along the store's leading key directions, re-ranked by their keys; needs pages "
                 "of a multiple of 16) (default: keys)")
      ->check(CLI::IsMember(recall_score_names()));
  app.add_option("--kv-recall-every", kv.recall_every,
                 "recall store: a decode step chooses each head's pages once every N steps, and the steps between attend "
                 "that choice without scoring the store (1: every step)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--kv-store-type", f.store_type, "row type of the recall store: f32, f16, bf16, q8_0, q4_0 (default: q8_0)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  app.add_option("--kv-store-file", kv.store_file,
                 "keep the recall store's rows in memory-mapped files of this directory (unlinked at once; on a disk, "
                 "not tmpfs), given back to the page cache in batches once written or read, so resident memory stays near "
                 "the exact cache")
      ->check(CLI::ExistingDirectory);
  std::string types;
  for (const std::string& t : kv_type_names()) types += (types.empty() ? "" : ", ") + t;
  app.add_option("--cache-type-k", f.cache_type_k, "KV cache type for keys (-ctk): " + types + " (default: f16)")
      ->check(CLI::IsMember(kv_type_names()));
  app.add_option("--cache-type-v", f.cache_type_v, "KV cache type for values (-ctv): " + types + " (default: f16)")
      ->check(CLI::IsMember(kv_type_names()));
}

// After parsing: overrides become set, cache types are parsed, and the settings become a validated
// policy through resolve_kv_policy (a budget alone means slake); an error throws slake::Error
// before any model is loaded.
inline void finish_kv_flags(const CLI::App& app, KvFlags& f) {
  KvPolicyParams& kv = f.params;
  if (!f.cache_type_k.empty()) kv.type_k = parse_kv_type(f.cache_type_k);
  if (!f.cache_type_v.empty()) kv.type_v = parse_kv_type(f.cache_type_v);
  if (!f.store_type.empty()) kv.store_type = parse_kv_type(f.store_type);
  if (!f.recall_score.empty()) kv.recall_score = parse_recall_score(f.recall_score);
  if (!f.aha_parts.empty()) kv.aha = parse_aha_parts(f.aha_parts);
  if (app.count("--kv-tau1")) kv.tau1 = f.tau1;
  if (app.count("--kv-tau2")) kv.tau2 = f.tau2;
  if (app.count("--kv-alpha")) kv.alpha = f.alpha;
  if (app.count("--kv-beta")) kv.beta = f.beta;
  kv = resolve_kv_policy(kv, app.count("--kv-budget") > 0 && app.count("--kv-policy") == 0);
  const CLI::Option* sweep = app.get_option_no_throw("--kv-sweep");
  if (kv.recall_pages > 0 && !kv.evicts() && !(sweep && sweep->count() > 0))
    fail("--kv-recall-pages recalls evicted tokens: it needs an evicting policy and a --kv-budget");
  for (const char* flag : {"--kv-recall-page", "--kv-recall-score", "--kv-recall-every", "--kv-store-type", "--kv-store-file"})
    if (app.count(flag) > 0 && kv.recall_pages == 0) fail(std::string(flag) + " sets the recall store: it needs --kv-recall-pages");
  if (!kv.store_file.empty()) check_store_dir(kv.store_file);
  if (app.count("--kv-ahakv") > 0 && !uses_aha(kv) && !(sweep && sweep->count() > 0))
    fail("--kv-ahakv sets AhaKV's parts: it needs --kv-policy ahakv or --kv-selector ahakv");
  if (app.count("--kv-sre-floor") > 0 && kv.sre_mass <= 0 && !(sweep && sweep->count() > 0))
    fail("--kv-sre-floor bounds SRE-mass sizing: it needs --kv-sre-mass");
  if ((kv.sre_mass > 0 || kv.selector != "auto") && !kv.evicts() && !(sweep && sweep->count() > 0))
    fail(std::string(kv.sre_mass > 0 ? "--kv-sre-mass" : "--kv-selector") + " chooses what an evicting policy keeps: it needs a --kv-budget");
}

// --kv-sweep's list (slake-perplexity, slake-cli --batch): POLICY/COMPENSATOR/BUDGET settings
// separated by commas, each applied on top of the command line's other KV flags and validated.
// POLICY may name AhaKV's selector and parts: `cake@ahakv` (CAKE's budgets, AhaKV's scores),
// `ahakv:recent+value` or `cake@ahakv:value` (those parts only), `slake@sre` (SRE ranking),
// `slake@sre:0.9` (SRE-mass at p = 0.9).
// --kv-recall-pages applies to the settings that evict; the others (full, budget 0) keep all.
inline std::vector<KvPolicyParams> parse_kv_sweep(const std::string& spec, const KvPolicyParams& base) {
  std::vector<KvPolicyParams> out;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    const size_t a = item.find('/'), b = a == std::string::npos ? a : item.find('/', a + 1);
    if (b == std::string::npos || item.find('/', b + 1) != std::string::npos)
      fail("--kv-sweep: '" + item + "' is not POLICY/COMPENSATOR/BUDGET (e.g. cake/taylor/128)");
    KvPolicyParams p = base;
    try {
      p = with_policy_label(p, item.substr(0, a));
    } catch (const Error& e) {
      fail("--kv-sweep: '" + item + "': " + e.what());
    }
    p.compensate = item.substr(a + 1, b - a - 1);
    const std::string budget = item.substr(b + 1);
    if (budget.empty() || budget.size() > 9 || budget.find_first_not_of("0123456789") != std::string::npos)
      fail("--kv-sweep: '" + item + "': the budget must be a number of tokens");
    p.budget = std::stoi(budget);
    if (!p.evicts()) p.recall_pages = 0;
    out.push_back(resolve_kv_policy(p, false));
    at = comma + 1;
  }
  if (base.recall_pages > 0 && std::none_of(out.begin(), out.end(), [](const KvPolicyParams& p) { return p.recall().on(); }))
    fail("--kv-recall-pages: no --kv-sweep setting evicts, so none would recall");
  return out;
}

// The cuda backend stores f32, f16, bf16 and q8_0 caches: any other type is an error there, thrown
// before a model is loaded.
inline void kv_types_for_backend(const KvPolicyParams& p, const std::string& backend) {
  if (backend != "cuda") return;
  check_kv_type_on_cuda(p.type_k);
  check_kv_type_on_cuda(p.type_v);
}

}  // namespace slake::tools
