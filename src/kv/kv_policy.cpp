#include "slake/kv/kv_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "slake/error.h"
#include "slake/kv/kv_budget.h"
#include "slake/cpu/ops.h"

namespace slake {

// slake-wide ranks at most min(C / 2, 256) of a layer's tokens by attention and keeps the rest of its
// budget for the newest tokens, as its window; the window also scores the prompt
// (docs/kv-quality.md, "slake-wide").
constexpr int kWideRankedMax = 256;

int kept_window(const KvPolicyParams& p) {
  return p.policy == "slake-wide" ? std::max(p.window, p.budget - std::min(p.budget / 2, kWideRankedMax)) : p.window;
}

int prefill_chunk_length(const KvPolicyParams& p, int done, int n) {
  const int rest = n - done;
  return p.prefill_chunk <= 0 || rest - p.prefill_chunk < p.window ? rest : p.prefill_chunk;
}

bool operator==(const KvPolicyParams& a, const KvPolicyParams& b) {
  auto fields = [](const KvPolicyParams& p) {
    return std::tie(p.policy, p.budget, p.window, p.observe, p.compensate, p.centroids, p.gamma, p.tau1, p.tau2, p.alpha, p.beta,
                    p.delta, p.cascade, p.evict_every, p.prefill_chunk, p.type_k, p.type_v, p.recall_pages, p.recall_page,
                    p.store_type, p.recall_score, p.recall_every, p.selector, p.aha, p.sre_mass, p.sre_floor);
  };
  return fields(a) == fields(b);
}

const std::vector<std::string>& kv_policy_names() {
  static const std::vector<std::string> names{"full", "streaming", "h2o", "ahakv", "snapkv", "pyramidkv", "cake", "slake", "slake-wide"};
  return names;
}

const std::vector<std::string>& kv_selector_names() {
  static const std::vector<std::string> names{"auto", "ahakv", "sre"};
  return names;
}

const std::vector<std::string>& kv_compensator_names() {
  static const std::vector<std::string> names{"auto", "taylor", "centroids", "none"};
  return names;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

void validate(const KvPolicyParams& p) {
  const std::vector<std::string>& names = kv_policy_names();
  if (std::find(names.begin(), names.end(), p.policy) == names.end())
    fail("unknown KV policy '" + p.policy + "' (" + join_names(names) + ")");
  const std::vector<std::string>& comp = kv_compensator_names();
  if (std::find(comp.begin(), comp.end(), p.compensate) == comp.end())
    fail("unknown KV compensator '" + p.compensate + "' (" + join_names(comp) + ")");
  const std::vector<std::string>& sel = kv_selector_names();
  if (std::find(sel.begin(), sel.end(), p.selector) == sel.end())
    fail("unknown KV selector '" + p.selector + "' (" + join_names(sel) + ")");
  if ((p.selector != "auto" || p.sre_mass > 0) && p.policy == "streaming")
    fail(std::string(p.sre_mass > 0 ? "--kv-sre-mass" : "--kv-selector " + p.selector) +
         ": streaming keeps the newest tokens by its own rule; choose an attention policy");
  if (!(p.sre_mass >= 0 && p.sre_mass <= 1)) fail("--kv-sre-mass must be in 0..1, got " + std::to_string(p.sre_mass));
  if (p.sre_floor < 0) fail("--kv-sre-floor must not be negative");
  if (p.sre_mass > 0 && p.selector != "auto" && p.selector != "sre")
    fail("--kv-sre-mass ranks tokens by their self-recall error: it takes no --kv-selector " + p.selector);
  if (uses_sre(p) && p.evicts()) {
    if (!p.absorbs())
      fail("the SRE selector measures what the compensator loses: it needs --kv-compensate taylor or centroids");
    if (p.prefill_chunk > 0) fail("--prefill-chunk: the SRE selector runs on whole prompts, for now");
  }
  if (p.evict_every < 1 || p.evict_every > 4096)
    fail("--kv-evict-every must be in 1..4096, got " + std::to_string(p.evict_every));
  if (p.centroids < 1 || p.centroids > 4096)
    fail("KV centroid count must be in 1..4096, got " + std::to_string(p.centroids));
  // Token counts far beyond any context are refused, so budget + window + evict_every stays an int.
  constexpr int kMaxTokens = 1 << 24;
  if (p.budget < 0 || p.budget > kMaxTokens)
    fail("KV budget must be in 0.." + std::to_string(kMaxTokens) + " tokens, got " + std::to_string(p.budget));
  if (p.window < 1 || p.window > kMaxTokens)
    fail("KV observation window must be in 1.." + std::to_string(kMaxTokens) + " tokens, got " + std::to_string(p.window));
  // Against the window the policy will have (slake-wide's is widened by resolve_kv_defaults).
  const int W = kept_window(p);
  if (p.observe < 0 || p.observe > W)
    fail("KV observing queries (--kv-observe) must be in 0..window (" + std::to_string(W) + "), got " + std::to_string(p.observe));
  if (p.prefill_chunk < 0 || p.prefill_chunk > kMaxTokens)
    fail("--prefill-chunk must be in 0.." + std::to_string(kMaxTokens) + " tokens, got " + std::to_string(p.prefill_chunk));
  if (p.prefill_chunk > 0 && p.evicts()) {
    if (p.policy == "h2o") fail("--prefill-chunk: h2o accumulates every query's attention over the whole prompt; chunks are for the window policies");
    if (policy_parts(p).selector == KvSelector::AhaKv && !p.aha.recent)
      fail("--prefill-chunk: ahakv without its 'recent' part accumulates every query's attention over the whole prompt");
    if (p.prefill_chunk < W)
      fail("--prefill-chunk " + std::to_string(p.prefill_chunk) + " must be at least the window (" + std::to_string(W) +
           " tokens): a chunk's last queries score it");
  }
  if (p.policy != "full" && p.budget > 0 && p.budget <= p.window)
    fail("KV budget " + std::to_string(p.budget) + " must be larger than the window " + std::to_string(p.window));
  if (!(p.gamma >= 0)) fail("KV indicator weight gamma must not be negative");
  for (const std::optional<double>& t : {p.tau1, p.tau2})
    if (t && !(*t > 0)) fail("KV CAKE exponents tau1/tau2 must be positive");
  for (const std::optional<double>& t : {p.alpha, p.beta})
    if (t && !(*t >= 0 && std::isfinite(*t))) fail("KV VABS exponents alpha/beta must not be negative");
  if (!(p.delta >= 0 && std::isfinite(p.delta))) fail("KV variance exponent delta must not be negative");
  if (p.recall_pages < 0 || p.recall_pages > kMaxTokens)
    fail("--kv-recall-pages must be in 0.." + std::to_string(kMaxTokens) + ", got " + std::to_string(p.recall_pages));
  if (p.recall_page < 1 || p.recall_page > 1024)
    fail("--kv-recall-page must be in 1..1024 tokens, got " + std::to_string(p.recall_page));
  if (p.recall_every < 1 || p.recall_every > 4096)
    fail("--kv-recall-every must be in 1..4096 decode steps, got " + std::to_string(p.recall_every));
  if (p.recall_pages > 0) {
    if (p.centroid_count() > 0) fail("--kv-recall-pages: the recall store covers the rest with the Taylor state or nothing, not centroids");
    if (kv_is_kivi(p.store_type))
      fail(std::string("--kv-store-type: ") + kv_type_name(p.store_type) + " is not a row type (f32, f16, bf16, q8_0, q4_0)");
  }
}

KvPolicyParams resolve_kv_defaults(KvPolicyParams p, const ModelConfig& c) {
  // The default tables (algorithm.md §2.4) are per model; models are told apart by shape, so any
  // conversion of them (GGUF or HF, any quantisation) gets the same defaults. Budgets between the
  // tabulated ones take the nearer (geometrically) of the two.
  enum { Other, Llama31_8B, Llama2_7B, Mistral7B_v03 } model = Other;
  if (c.n_layers == 32 && c.dim == 4096) {
    if (c.n_vocab == 128256 && c.n_kv_heads == 8) model = Llama31_8B;
    else if (c.n_vocab == 32000 && c.n_kv_heads == 32) model = Llama2_7B;
    else if (c.n_vocab == 32768 && c.n_kv_heads == 8) model = Mistral7B_v03;
  }
  const int64_t b2 = static_cast<int64_t>(p.budget) * p.budget;
  const bool big_tau = b2 > 128 * 1024;  // nearer 1024 than 128: from 363 up
  const bool big_ab = b2 > 128 * 256;    // nearer 256 than 128: from 182 up
  double t1 = 1.0, t2 = 1.0, a = 0.5, b = 0.4;
  switch (model) {
    case Llama31_8B: t1 = 1.6; t2 = big_tau ? 0.4 : 0.6; a = big_ab ? 0.6 : 0.4; b = big_ab ? 0.5 : 0.2; break;
    case Llama2_7B: t1 = big_tau ? 1.9 : 0.9; t2 = big_tau ? 1.8 : 2.3; break;
    case Mistral7B_v03: t1 = big_tau ? 0.8 : 1.0; t2 = big_tau ? 0.5 : 0.8; a = big_ab ? 0.4 : 0.6; b = big_ab ? 0.2 : 0.5; break;
    case Other: break;
  }
  if (!p.tau1) p.tau1 = t1;
  if (!p.tau2) p.tau2 = t2;
  if (!p.alpha) p.alpha = a;
  if (!p.beta) p.beta = b;
  p.window = kept_window(p);
  return p;
}

KvPolicyParams resolve_kv_policy(KvPolicyParams p, bool budget_alone, const ModelConfig* model) {
  if (budget_alone && p.budget > 0 && p.policy == "full") p.policy = "slake";
  validate(p);
  return model ? resolve_kv_defaults(p, *model) : p;
}

KvPolicyParts policy_parts(const std::string& policy) {
  if (policy == "streaming") return {KvSelector::Recent, KvAllocator::Uniform};
  if (policy == "h2o") return {KvSelector::HeavyHitter, KvAllocator::Uniform};
  if (policy == "ahakv") return {KvSelector::AhaKv, KvAllocator::Uniform};
  if (policy == "snapkv") return {KvSelector::WindowMax7, KvAllocator::Uniform};
  if (policy == "pyramidkv") return {KvSelector::WindowMax7, KvAllocator::Pyramid};
  if (policy == "cake") return {KvSelector::Indicator, KvAllocator::Cake};
  if (policy == "slake") return {KvSelector::Indicator, KvAllocator::Vabs};
  if (policy == "slake-wide") return {KvSelector::Indicator, KvAllocator::VabsVariance};
  return {KvSelector::None, KvAllocator::None};
}

KvPolicyParts policy_parts(const KvPolicyParams& p) {
  KvPolicyParts parts = policy_parts(p.policy);
  if (p.selector == "ahakv" && parts.selector != KvSelector::None) parts.selector = KvSelector::AhaKv;
  if ((p.selector == "sre" || p.sre_mass > 0) && parts.selector != KvSelector::None) parts.selector = KvSelector::Sre;
  return parts;
}

bool uses_aha(const KvPolicyParams& p) { return policy_parts(p).selector == KvSelector::AhaKv; }

bool uses_sre(const KvPolicyParams& p) { return policy_parts(p).selector == KvSelector::Sre; }

std::string kv_policy_label(const KvPolicyParams& p) {
  std::string label = p.policy;
  if (uses_sre(p)) {
    label += "@sre";
    if (p.sre_mass > 0) {  // the shortest spelling that reads back as the same number
      char mass[40];
      for (int digits = 1; digits <= 17; ++digits) {
        std::snprintf(mass, sizeof mass, ":%.*g", digits, p.sre_mass);
        if (std::strtod(mass + 1, nullptr) == p.sre_mass) break;
      }
      label += mass;
    }
    return label;
  }
  if (!uses_aha(p)) return label;
  if (p.policy != "ahakv") label += "@ahakv";
  if (p.aha != AhaParts{}) label += ":" + aha_parts_name(p.aha);
  return label;
}

KvPolicyParams with_policy_label(KvPolicyParams p, const std::string& name) {
  std::string label = name, suffix;
  const size_t colon = label.find(':');
  if (colon != std::string::npos) {
    suffix = label.substr(colon + 1);
    label.resize(colon);
  }
  const size_t at = label.find('@');
  if (at != std::string::npos) {
    p.selector = label.substr(at + 1);
    label.resize(at);
  }
  p.policy = label;
  if (colon == std::string::npos) return p;
  if (p.selector == "sre") {  // @sre:P, SRE-mass at P
    char* end = nullptr;
    p.sre_mass = std::strtod(suffix.c_str(), &end);
    if (suffix.empty() || *end != '\0' || !(p.sre_mass > 0 && p.sre_mass <= 1))
      fail("SRE-mass needs a share in (0, 1] after @sre:, got '" + suffix + "'");
    return p;
  }
  p.aha = parse_aha_parts(suffix);
  if (!uses_aha(p)) fail("AhaKV's parts need the policy ahakv or the selector @ahakv");
  return p;
}

bool accumulates(const KvPolicyParams& p) {
  const KvSelector s = policy_parts(p).selector;
  return s == KvSelector::HeavyHitter || s == KvSelector::AhaKv;
}

}  // namespace slake
