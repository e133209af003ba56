// KV-cache policies (algorithm.md §6): a token selector, a layer budget allocator and an optional
// compensator (the Taylor linear cache), named together by a policy.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "slake/kv/kv_ahakv.h"
#include "slake/kv/kv_recall.h"
#include "slake/kv/kv_type.h"
#include "slake/model/model.h"

namespace slake {

struct KvPolicyParams {
  // full, streaming, h2o, ahakv, snapkv, pyramidkv, cake, slake and slake-wide (algorithm.md §6.1):
  // slake-wide is slake with a window of C - min(C/2, 256) tokens, at least half the budget
  // (resolve_kv_defaults), and VABS's layer preference times CAKE's attention variance to the power
  // delta (docs/kv-quality.md).
  std::string policy = "full";
  int budget = 0;               // C: average tokens kept per layer, window included; 0 = no eviction
  int window = 32;              // Sw
  // Sobs: how many of the prompt's last queries score its tokens at prefill (0: the window's,
  // algorithm.md §2.2; at most the window). Fewer than the window keeps scores by the prompt's end
  // alone.
  int observe = 0;
  // What happens to evicted tokens: "auto" (the policy's own: taylor for slake, none otherwise:
  // slake-wide measured better without it at equal bytes, docs/kv-quality.md),
  // "taylor" (absorbed into the linear state, attended by PTAA), "centroids" (merged into
  // `centroids` mean tokens per head, algorithm.md §3.2) or "none" (dropped).
  std::string compensate = "auto";
  int centroids = 32;           // K of the centroid compensator
  double gamma = 200.0;         // indicator variance weight
  // Layer-preference exponents; unset: the per-model defaults (algorithm.md §2.4, resolve_kv_defaults).
  std::optional<double> tau1, tau2;   // CAKE
  std::optional<double> alpha, beta;  // VABS
  double delta = 1.0;           // slake-wide: exponent of the attention variance in its layer preference
  bool cascade = true;          // evict after every layer; false: once, after the last (Theorem 1 tests)
  // Decode-time eviction in batches (algorithm.md §5.5): a head may grow to its budget + window +
  // evict_every - 1 rows, then gives up evict_every rows chosen by one scoring (1: one row per step).
  int evict_every = 1;
  // Chunked prefill: 0 takes a prompt in one pass (each layer sees it whole before it evicts); N
  // takes a longer prompt N tokens at a time through every layer, each chunk attending to what the
  // chunks before it kept (and the compensator) and evicting before the next, so attention costs
  // O(S (C + N)) instead of O(S^2). Evicting policies other than h2o; N >= the window.
  int prefill_chunk = 0;
  // How the exact cache stores keys and values (kv_type.h; -ctk/-ctv). The linear states are fp32.
  KvType type_k = KvType::F16, type_v = KvType::F16;
  // The recall store (kv_recall.h, algorithm.md §9): recall_pages > 0 keeps every evicted token in
  // pages of recall_page tokens stored as store_type, and attends the recall_pages pages of highest
  // score (recall_score) per query and KV head with the exact cache. The Taylor state, if the policy
  // keeps one, then covers the evicted tokens not recalled. Evicting policies only (recall()); no
  // centroids.
  int recall_pages = 0;
  int recall_page = 16;
  KvType store_type = KvType::Q8_0;
  RecallScore recall_score = RecallScore::Keys;  // how pages are ranked (kv_recall.h)
  // A decode step chooses a head's pages once every recall_every steps; the steps between attend
  // the last choice without scoring the store (RecallConfig::every; 1: every step).
  int recall_every = 1;
  // --kv-store-file: a directory whose memory-mapped files hold the stores' rows (store_memory.h);
  // "": the heap. Where the rows live, not the policy: not in operator== or state files.
  std::string store_file;
  // The token selector: "auto" (the policy's own), "ahakv" (AhaKV's scores with the policy's
  // allocator and compensator, algorithm.md §2.3) or "sre" (the compensator's self-recall error,
  // §2.8; a compensated policy). `aha`: the parts of AhaKV's scores used by the ahakv policy or
  // selector (each can be switched off for the ablation).
  std::string selector = "auto";
  AhaParts aha;
  // SRE-mass sizing (algorithm.md §2.8): p > 0 ranks by SRE and gives each KV head the fewest
  // prefix tokens whose SRE sums to p of its total, at least sre_floor and at most C - Sw (the
  // budget stays the cap that memory is planned for). 0: off.
  double sre_mass = 0.0;
  int sre_floor = 0;
  // Every field (as operator==), for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(policy, budget, window, observe, compensate, centroids, gamma, tau1, tau2, alpha, beta, delta, cascade, evict_every,
      prefill_chunk, type_k, type_v, recall_pages, recall_page, store_type, recall_score, recall_every, selector, aha, sre_mass,
      sre_floor);
  }

  // Evicted tokens go to the Taylor state (algorithm.md §3.1).
  bool taylor() const { return compensate == "taylor" || (compensate == "auto" && policy == "slake"); }
  // The linear states' centroid count: K with the centroid compensator, else 0.
  int centroid_count() const { return compensate == "centroids" ? centroids : 0; }
  // Evicted tokens are kept in some summary (taylor or centroids) rather than dropped.
  bool absorbs() const { return taylor() || centroid_count() > 0; }
  // The compensator's name as the tools print it: taylor, centroids or none.
  std::string compensator() const { return centroid_count() > 0 ? "centroids" : taylor() ? "taylor" : "none"; }
  bool evicts() const { return policy != "full" && budget > 0; }
  // The cache's recall settings: off unless recall_pages > 0 and the policy evicts (a --kv-sweep
  // applies --kv-recall-pages to the settings that evict; the tools refuse it alone without one).
  RecallConfig recall() const {
    return RecallConfig{evicts() ? recall_pages : 0, recall_page, store_type, recall_score,
                        store_file.empty() ? nullptr : std::make_shared<const std::string>(store_file), recall_every};
  }
  // The observing queries at prefill: Sobs, or the whole window.
  int observed() const { return observe > 0 ? observe : window; }
};

// The window a policy keeps: Sw, or slake-wide's C - min(C/2, 256) when that is larger.
int kept_window(const KvPolicyParams& p);

// The length of the chunk that starts after `done` tokens of an n-token prompt prefilled in chunks
// of p.prefill_chunk (p resolved): a chunk, or the whole rest when less than a chunk plus the window
// would be left after it (a chunk's last queries score it, so the last one is at least a window).
int prefill_chunk_length(const KvPolicyParams& p, int done, int n);

// Every field equal: two contexts with equal policies keep and evict the same tokens.
bool operator==(const KvPolicyParams& a, const KvPolicyParams& b);
inline bool operator!=(const KvPolicyParams& a, const KvPolicyParams& b) { return !(a == b); }

// The policy names, in the order of algorithm.md §6.1's table, the compensator names and the
// selector names: the one list the flags' help and checks, the server's errors and --kv-sweep read.
const std::vector<std::string>& kv_policy_names();
const std::vector<std::string>& kv_compensator_names();
const std::vector<std::string>& kv_selector_names();
// "a, b, c": a name list as help text and errors print it.
std::string join_names(const std::vector<std::string>& names);

// Throws slake::Error for unknown names and out-of-range values.
void validate(const KvPolicyParams& p);

// Fills the unset hyperparameters with the defaults of algorithm.md §2.4 for this model and
// budget, and widens slake-wide's window to C - min(C/2, 256) (never below the window asked for).
// Idempotent.
KvPolicyParams resolve_kv_defaults(KvPolicyParams p, const ModelConfig& c);

// The one place where a user's KV settings (flags, a request's fields, a sweep item) become a
// policy: `budget_alone` (a budget was given and no policy named) with a positive budget on the
// default "full" means slake; the result is validated and, given a model, its unset
// hyperparameters take that model's defaults (resolve_kv_defaults). Throws slake::Error.
KvPolicyParams resolve_kv_policy(KvPolicyParams p, bool budget_alone, const ModelConfig* model = nullptr);

// What ranks the tokens of a layer.
enum class KvSelector {
  None,
  Recent,       // streaming: 4 sink tokens, then the most recent
  HeavyHitter,  // h2o: attention accumulated over every query so far
  AhaKv,        // ahakv: step-gain attention over the recent queries, times the value prior (kv_ahakv.h)
  Sre,          // --kv-selector sre: the compensator's self-recall error (kv_sre.h)
  WindowMax7,   // snapkv, pyramidkv: window attention, max-pooled over 7 positions
  Indicator,    // cake, slake: window mean + gamma variance, average-pooled over 5 (algorithm.md §2.3)
};
// How the total budget is split over the layers.
enum class KvAllocator {
  None,
  Uniform,  // C - Sw prefix tokens per layer
  Pyramid,  // linearly decreasing with depth (PyramidKV, beta = 20)
  Cake,     // CAKE preference, cascading
  Vabs,     // SLAKE's VABS preference, cascading
  // slake-wide: VABS's preference times CAKE's attention variance Vr^delta, cascading. VABS alone
  // moves the budget to the first layers, whose window attention hardly moves; Vr says which
  // layers' attention shifts between queries (docs/kv-quality.md).
  VabsVariance,
};
// Whether the allocator splits the budget by a layer preference, cascading (algorithm.md §2.5-2.6).
inline bool by_preference(KvAllocator a) { return a == KvAllocator::Cake || a == KvAllocator::Vabs || a == KvAllocator::VabsVariance; }
struct KvPolicyParts {
  KvSelector selector;
  KvAllocator allocator;
};
KvPolicyParts policy_parts(const std::string& policy);
// The policy's parts with its selector setting applied (p.selector "ahakv" replaces the selector).
KvPolicyParts policy_parts(const KvPolicyParams& p);
// Whether the policy ranks by the compensator's self-recall error (selector sre, or SRE-mass).
bool uses_sre(const KvPolicyParams& p);
// Whether the policy's selector accumulates attention over the queries (h2o, ahakv): such a
// selector scores from the prompt's first token (ahakv with `recent`: its last r) and keeps sums
// per cache row.
bool accumulates(const KvPolicyParams& p);
// Whether the policy scores tokens with AhaKV (the policy ahakv, or the selector ahakv on an
// evicting policy), so its `aha` parts matter.
bool uses_aha(const KvPolicyParams& p);
// The setting as --kv-sweep spells its policy: "cake", "ahakv", "cake@ahakv", "ahakv:recent+value",
// "slake@sre" (SRE ranking with slake's budgets), "slake@sre:0.9" (SRE-mass at p = 0.9).
std::string kv_policy_label(const KvPolicyParams& p);
// p with the policy, selector and AhaKV parts a label names (the inverse of kv_policy_label; a
// label without parts keeps p's). Throws slake::Error for parts where AhaKV does not score.
KvPolicyParams with_policy_label(KvPolicyParams p, const std::string& label);

}  // namespace slake
