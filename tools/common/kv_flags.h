// The KV-cache flags shared by slake-cli, slake-perplexity and slake-bench.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "slake/kv_policy.h"

namespace slake::tools {

struct KvFlags {
  KvPolicyParams params;
  double tau1 = 0, tau2 = 0, alpha = 0, beta = 0;  // copied into params only when given
};

inline void add_kv_flags(CLI::App& app, KvFlags& f) {
  KvPolicyParams& kv = f.params;
  app.add_option("--kv-policy", kv.policy,
                 "KV-cache policy: full, streaming, h2o, snapkv, pyramidkv, cake, slake (default: slake when "
                 "--kv-budget is given, else full)");
  app.add_option("--kv-budget", kv.budget, "C: average tokens kept per layer, window included (0: keep all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-window", kv.window, "observation window Sw (the last Sw tokens are always kept)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-compensate", kv.compensate,
                 "evicted tokens: taylor (linear cache + PTAA), centroids (merged into --kv-centroids mean "
                 "tokens per head), none (dropped), auto (taylor for slake only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "taylor", "centroids", "none"}));
  app.add_option("--kv-centroids", kv.centroids, "centroids per layer and KV head of --kv-compensate centroids")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--kv-gamma", kv.gamma, "indicator variance weight gamma")->capture_default_str();
  app.add_option("--kv-tau1", f.tau1, "CAKE preference exponent 1/tau1 (default: per model and budget)");
  app.add_option("--kv-tau2", f.tau2, "CAKE preference exponent 1/tau2 (default: per model and budget)");
  app.add_option("--kv-alpha", f.alpha, "VABS preference exponent alpha (default: per model and budget)");
  app.add_option("--kv-beta", f.beta, "VABS preference exponent beta (default: per model and budget)");
}

// After parsing: the policy defaults to slake when only a budget is given; overrides become set.
inline void finish_kv_flags(const CLI::App& app, KvFlags& f) {
  KvPolicyParams& kv = f.params;
  if (kv.budget > 0 && app.count("--kv-policy") == 0) kv.policy = "slake";
  if (app.count("--kv-tau1")) kv.tau1 = f.tau1;
  if (app.count("--kv-tau2")) kv.tau2 = f.tau2;
  if (app.count("--kv-alpha")) kv.alpha = f.alpha;
  if (app.count("--kv-beta")) kv.beta = f.beta;
}

}  // namespace slake::tools
