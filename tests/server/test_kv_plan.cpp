// The KV memory slake-server plans for a request before admitting it (tools/server/kv_plan.cpp)
// against what a context of that policy and cache type really holds: the plan must bound the
// cache's peak (admission would otherwise let requests run the server out of memory), and for
// the full cache it is the cache's bytes to the byte, worked out here from the types' layouts.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../../tools/server/kv_plan.h"
#include "slake/context.h"
#include "slake/kv/kv_policy.h"
#include "slake/model/synthetic_model.h"

namespace slake::server {
namespace {

struct Case {
  std::string policy, compensate;
  int budget;
  KvType type;
  int recall_pages = 0;  // a recall store (q8_0 pages of 16) when > 0
};

// Bytes one token takes in one KV head: key and value rows in the type's blocks, and a 4-byte position.
size_t token_bytes_by_hand(KvType t, int d) {
  switch (t) {
    case KvType::F32: return 2 * 4 * d + 4;
    case KvType::F16: return 2 * 2 * d + 4;
    case KvType::Q8_0: return 2 * (d / 32) * (32 + 2) + 4;  // 32 int8 quants and an fp16 scale per block
    default: ADD_FAILURE() << "no layout worked out for this type"; return 0;
  }
}

TEST(KvPlan, BoundsThePeakOfEveryPolicyAndCacheType) {
  const auto model = make_synthetic_model("tiny", DType::F32, 3);
  const ModelConfig& c = model->cfg;
  ASSERT_EQ(c.head_dim % 32, 0);
  const int n_ctx = 512, prompt = 200, decoded = 40;
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(prompt + decoded);
  for (int32_t& t : tokens) t = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(c.n_vocab - 1));

  const std::vector<Case> cases = {
      {"full", "none", 0, KvType::F32},           {"full", "none", 0, KvType::F16},
      {"full", "none", 0, KvType::Q8_0},          {"full", "none", 0, KvType::KIVI4},
      {"streaming", "none", 32, KvType::F16},     {"h2o", "none", 32, KvType::F16},
      {"snapkv", "none", 48, KvType::F16},        {"cake", "centroids", 48, KvType::F16},
      {"slake", "auto", 48, KvType::F16},         {"slake-wide", "none", 64, KvType::KIVI4},
      {"pyramidkv", "taylor", 48, KvType::Q8_0},  {"snapkv", "none", 48, KvType::F16, 4},
      {"slake", "auto", 48, KvType::Q8_0, 2},     {"ahakv", "none", 48, KvType::F16},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.policy + "/" + k.compensate + "/" + std::to_string(k.budget) + "/" + kv_type_name(k.type));
    KvPolicyParams p;
    p.policy = k.policy;
    p.compensate = k.compensate;
    p.budget = k.budget;
    p.type_k = p.type_v = k.type;
    p.window = 16;
    p.recall_pages = k.recall_pages;
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    cp.kv = resolve_kv_policy(p, false, &c);
    Context ctx(*model, cp);
    std::vector<float> logits;
    ctx.eval(std::vector<int32_t>(tokens.begin(), tokens.begin() + prompt), &logits);
    for (int i = prompt; i < prompt + decoded; ++i) ctx.eval({tokens[static_cast<size_t>(i)]}, &logits);

    const size_t plan = planned_kv_bytes(c, cp.kv, n_ctx, prompt + decoded, prompt);
    EXPECT_LE(ctx.kv_cache().peak_bytes_used(), plan);
    // The selector's own rows (h2o's sums, AhaKV's ring) are planned with the cache.
    EXPECT_LE(ctx.kv_cache().bytes_used() + ctx.evictor().selector_state_bytes(), plan);
    if (k.policy == "ahakv") {
      KvPolicyParams snap = cp.kv;
      snap.policy = "snapkv";
      EXPECT_GT(ctx.evictor().selector_state_bytes(), 0u);
      EXPECT_GT(plan, planned_kv_bytes(c, snap, n_ctx, prompt + decoded, prompt));
    }
    KvPolicyParams full_kv = cp.kv;
    full_kv.policy = "full";
    full_kv.budget = 0;
    full_kv.recall_pages = 0;
    full_kv = resolve_kv_policy(full_kv, false, &c);
    const size_t full_plan = planned_kv_bytes(c, full_kv, n_ctx, prompt + decoded, prompt);
    if (k.recall_pages > 0) {
      EXPECT_GT(ctx.kv_cache().store_bytes_used(), 0u);  // the store is in the peak the plan bounds
    } else if (cp.kv.evicts()) {
      EXPECT_LT(plan, full_plan);  // an evicting policy's plan is its own bound, not the full cache's
    } else if (!kv_is_kivi(k.type)) {
      const size_t by_hand = static_cast<size_t>(prompt + decoded) * c.n_layers * c.n_kv_heads * token_bytes_by_hand(k.type, c.head_dim);
      EXPECT_EQ(plan, by_hand);
      EXPECT_EQ(ctx.kv_cache().bytes_used(), by_hand);
    }
  }
  // A request can never plan beyond its context.
  KvPolicyParams full;
  EXPECT_EQ(planned_kv_bytes(c, resolve_kv_policy(full, false, &c), n_ctx, 10 * n_ctx, prompt),
            planned_kv_bytes(c, resolve_kv_policy(full, false, &c), n_ctx, n_ctx, prompt));
}

}  // namespace
}  // namespace slake::server
