// The device forward pass (src/cuda/device_context.h) against the CPU Context, the reference of
// the engine (itself checked against Hugging Face transformers), on the tiny fixture models and on
// stories260K when ../shared has it: prefill logits of every prompt token, then greedy decode
// steps, for `full` and for evicting policies with a budget smaller than the prompt, so that
// prefill eviction, the linear state and decode eviction all run.
//
// Tolerance. The device keeps weights in bf16 and rounds the activations to bf16 at every GEMM
// input (cuBLAS with bf16 operands, fp32 accumulation). The CPU reference runs on the same
// bf16-rounded weights in fp32, so what is left is the activations' rounding (relative 2^-9 per
// GEMM input), which adds up layer by layer: max |logit diff| <= 0.02 + 0.01 * n_layers * max |logit|
// (0.02 for the two-layer fixtures; 0.06 for the six layers of gemma3-swa, whose post-norms and
// scaled embedding give 0.29 both on an H100 and under emulation). Under emulation each comparison also
// runs with the host GEMM keeping fp32 activations (set_host_gemm_rounding(false)): then the rest
// of the device pass must match the CPU to max |diff| <= 1e-4 + 1e-4 * max |logit|, and the
// eviction decisions (layer budgets, tokens held per layer, KV bytes) must be identical. With
// rounded activations a layer budget may legitimately move by a token, so they are not compared.
// A wrong kernel, a wrong eviction or a lost Taylor term moves logits by O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_session.h"
#include "cuda/device_context.h"
#include "device_memory.h"
#include "slake/context.h"
#include "slake/quant/dtype.h"
#include "slake/error.h"
#include "slake/model/model.h"
#include "slake/model/synthetic_model.h"
#include "slake/session.h"
#include "slake/quant/weight_pack.h"
#include "test_util.h"

#ifndef SLAKE_KERNEL_TESTS_ON_GPU
#define SLAKE_KERNEL_TESTS_ON_GPU 0
#endif

namespace slake::gpu::test {
namespace {

struct Tolerance {
  double abs, rel;
  bool exact_decisions;
};
constexpr Tolerance kBf16Activations{0.02, 0.02, false}, kFp32Activations{1e-4, 1e-4, true};
// A cache stored below f32: a key or value that the two backends' fp32 summation orders put on
// either side of a rounding boundary of its type is stored one step apart (up to 2^-8 relative
// for bf16, scale / 127 for q8_0), and moves the logits by about 1e-3; the decisions stay exact.
constexpr Tolerance kFp32ActivationsStoredTypes{2e-3, 2e-3, true};
Tolerance g_tol = kBf16Activations;

// The model with its matrices and embedding table rounded to bf16 (what the device holds), as F32.
std::unique_ptr<Model> bf16_rounded(const Model& src) {
  auto m = std::make_unique<Model>();
  m->cfg = src.cfg;
  m->vocab = src.vocab;
  m->path = src.path;
  m->format = src.format;
  auto store = std::make_shared<std::vector<std::vector<float>>>();
  auto conv = [&](const TensorView& t, bool round) {
    std::vector<float> f(static_cast<size_t>(t.n_elements()));
    std::vector<uint8_t> raw;
    for (int64_t r = 0; r < t.n_rows(); ++r)
      dequantize_row(t.type, row_in_file_layout(t, r, raw), f.data() + r * t.row_len(), t.row_len());
    if (round)
      for (float& x : f) x = bf16_to_fp32(fp32_to_bf16(x));
    store->push_back(std::move(f));
    TensorView o = t;
    o.type = DType::F32;
    o.layout = WeightLayout::Rows;
    o.data = reinterpret_cast<const uint8_t*>(store->back().data());
    o.nbytes = store->back().size() * sizeof(float);
    return o;
  };
  m->tok_embd = conv(src.tok_embd, true);
  m->output_norm = conv(src.output_norm, false);
  m->output = src.cfg.tied_output ? m->tok_embd : conv(src.output, true);
  for (const LayerWeights& w : src.layers) {
    LayerWeights o;
    o.attn_norm = conv(w.attn_norm, false);
    o.wq = conv(w.wq, true), o.wk = conv(w.wk, true), o.wv = conv(w.wv, true), o.wo = conv(w.wo, true);
    o.ffn_norm = conv(w.ffn_norm, false);
    if (w.w_gate.data) o.w_gate = conv(w.w_gate, true), o.w_up = conv(w.w_up, true), o.w_down = conv(w.w_down, true);
    // A mixture's router, experts and shared expert are device matrices.
    for (auto [from, to] : {std::pair{&w.router, &o.router}, {&w.shexp_gate, &o.shexp_gate}, {&w.shexp_up, &o.shexp_up},
                            {&w.shexp_down, &o.shexp_down}, {&w.shexp_router, &o.shexp_router}})
      if (from->data) *to = conv(*from, true);
    for (auto [from, to] : {std::pair{&w.exp_gate, &o.exp_gate}, {&w.exp_up, &o.exp_up}, {&w.exp_down, &o.exp_down}})
      for (const TensorView& t : *from) to->push_back(conv(t, true));
    // The vectors of the families' layers (biases, per-head norms, post-norms) stay fp32 on the device.
    for (auto [from, to] : {std::pair{&w.bq, &o.bq}, {&w.bk, &o.bk}, {&w.bv, &o.bv}, {&w.q_norm, &o.q_norm}, {&w.k_norm, &o.k_norm},
                            {&w.attn_post_norm, &o.attn_post_norm}, {&w.ffn_post_norm, &o.ffn_post_norm}})
      if (from->data) *to = conv(*from, false);
    m->layers.push_back(o);
  }
  m->storage = store;
  return m;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

// Largest |got - want|, failing the test when it is beyond the tolerance.
double expect_logits_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double diff = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
  const double tol = g_tol.abs + g_tol.rel * max_abs(want);
  EXPECT_LE(diff, tol) << what << ": max |diff| " << diff << " over " << want.size() << " logits (max |logit| " << max_abs(want) << ")";
  return diff;
}

std::vector<int32_t> prompt_tokens(int n, int n_vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t s = seed;
  for (int32_t& x : t) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return t;
}

// Prefill of `prompt` (all logits), then `steps` greedy decode steps, on both backends.
void compare_once(const Model& model, const ContextParams& cp, const std::vector<int32_t>& prompt, int steps, const std::string& what) {
  const std::unique_ptr<Model> ref_model = bf16_rounded(model);
  Context cpu(*ref_model, cp);
  DeviceContext dev(model, cp);
  std::vector<float> want, got;
  cpu.eval(prompt, &want, true);
  dev.eval(prompt, &got, true);
  double worst = expect_logits_close(got, want, what + " prefill");
  const int V = model.cfg.n_vocab;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> last(want.end() - V, want.end());
    const int32_t tok = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    cpu.eval({tok}, &want);
    dev.eval({tok}, &got);
    worst = std::max(worst, expect_logits_close(got, want, what + " decode step " + std::to_string(s)));
  }
  for (int l = 0; g_tol.exact_decisions && l < model.cfg.n_layers; ++l) {
    int cpu_held = 0;
    for (int h = 0; h < model.cfg.n_kv_heads; ++h) cpu_held += cpu.kv_cache().head(l, h).n;
    EXPECT_EQ(dev.layer_tokens_held(l) * model.cfg.n_kv_heads, cpu_held) << what << ": tokens held by layer " << l;
  }
  if (g_tol.exact_decisions) {
    EXPECT_EQ(dev.budgets(), cpu.evictor().budgets()) << what << ": layer budgets";
    EXPECT_EQ(dev.kv_bytes_used(), cpu.kv_cache().bytes_used()) << what << ": KV bytes in use";
    EXPECT_EQ(dev.kv_store_bytes(), cpu.kv_cache().store_bytes_used()) << what << ": the recall stores' bytes";
  }
  EXPECT_EQ(dev.n_past(), cpu.n_past());
  std::printf("%s: max |logit diff| %.3g, KV %zu bytes, arena %s\n", what.c_str(), worst, dev.kv_bytes_used(),
              dev.plan().summary().c_str());
}

// On the device: as cuBLAS computes. Under emulation: that, then with fp32 activations.
// bf16: false where one token more or less in a layer budget (which bf16 rounding can cause) drops
// a different token and so moves the logits by O(1): cake without the linear cache (compared only
// under emulation, with fp32 activations).
void compare(const Model& model, const ContextParams& cp, const std::vector<int32_t>& prompt, int steps, const std::string& what,
             bool bf16 = true, Tolerance fp32_tol = kFp32Activations) {
  const Tolerance bf16_tol{kBf16Activations.abs, 0.01 * model.cfg.n_layers, false};
  g_tol = bf16_tol;
  if (bf16) compare_once(model, cp, prompt, steps, what + " [bf16 activations]");
#if !SLAKE_KERNEL_TESTS_ON_GPU
  set_host_gemm_rounding(false);
  g_tol = fp32_tol;
  compare_once(model, cp, prompt, steps, what + " [fp32 activations]");
  set_host_gemm_rounding(true);
  g_tol = bf16_tol;
#else
  (void)fp32_tol;  // on the device only the bf16 pass runs
#endif
}

ContextParams params(int n_ctx, const std::string& policy, int budget, int window, int n_batch = 16) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_threads = 2;
  cp.n_batch = n_batch;
  cp.kv.policy = policy;
  cp.kv.budget = budget;
  cp.kv.window = window;
  cp.kv.type_k = cp.kv.type_v = KvType::F32;  // the exact cache; StoredCacheTypesMatchCpu covers the others
  return cp;
}

std::unique_ptr<Model> fixture(const std::string& name) {
  return load_model(slake::test::fixtures_dir() + "/models/" + name + "/model.gguf");
}

class FixtureModels : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureModels, FullMatchesCpu) {
  const auto m = fixture(GetParam());
  compare(*m, params(96, "full", 0, 8), prompt_tokens(40, m->cfg.n_vocab, 1), 4, GetParam() + " full");
}

TEST_P(FixtureModels, SlakeEvictingMatchesCpu) {
  const auto m = fixture(GetParam());
  // Budget 12 with a window of 4 against a 40-token prompt: every layer evicts at prefill (its
  // rows folded into the linear state) and again at every decode step.
  // gemma3-swa (local layers keep their window, the policy the global one): its decode scores have
  // near-ties that bf16 activations flip, so it is compared with fp32 activations only, where the
  // decisions must be identical. So are the mixtures of experts: bf16 activations flip a router's
  // near-tie here (qwen3-moe: 1.4 at decode step 3, 3.6e-6 with fp32 activations), sending a token
  // to another expert.
  compare(*m, params(96, "slake", 12, 4), prompt_tokens(40, m->cfg.n_vocab, 2), 4, GetParam() + " slake C=12",
          /*bf16=*/m->cfg.swa_layers.empty() && m->cfg.n_expert == 0);
  if (!m->cfg.swa_layers.empty())  // a prompt inside the budget, then decode eviction and the windows' trims
    compare(*m, params(96, "snapkv", 12, 4), prompt_tokens(10, m->cfg.n_vocab, 3), 12, GetParam() + " snapkv short prompt", false);
}

INSTANTIATE_TEST_SUITE_P(DeviceContext, FixtureModels,
                         ::testing::Values("llama2-mha", "llama-gqa-tied", "mistral-swa", "llama31-rope-scaling", "llama2-mha-q8_0",
                                           "qwen2-bias", "qwen3-qknorm", "gemma3-swa", "phi3-longrope", "mixtral-moe", "qwen3-moe",
                                           "qwen2-moe", "gemma2-softcap"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Gemma 2's soft-capped logits through the compensators (the Taylor state expanded by the chain
// rule, capped centroid logits) and VABS's preference (slake above covers the cascade), on the
// device as on the CPU; fp32 activations, as for every model with local layers.
TEST(DeviceContext, SoftCappedCompensatorsMatchCpu) {
  const auto m = fixture("gemma2-softcap");
  for (const char* comp : {"taylor", "centroids"}) {
    ContextParams cp = params(96, "cake", 12, 4);
    cp.kv.compensate = comp;
    cp.kv.centroids = 3;
    compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 6), 3, std::string("gemma2-softcap cake+") + comp, false);
  }
  compare(*m, params(96, "slake-wide", 12, 4), prompt_tokens(40, m->cfg.n_vocab, 7), 3, "gemma2-softcap slake-wide", false);
}

TEST(DeviceContext, OtherPoliciesMatchCpu) {
  const auto m = fixture("llama-gqa-tied");
  for (const char* policy : {"cake", "snapkv", "pyramidkv", "streaming"})
    compare(*m, params(96, policy, 12, 4), prompt_tokens(40, m->cfg.n_vocab, 3), 3, std::string("llama-gqa-tied ") + policy,
            std::string(policy) != "cake");
  ContextParams cp = params(96, "cake", 12, 4);
  cp.kv.compensate = "taylor";  // cake with the linear cache
  compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 4), 3, "llama-gqa-tied cake+taylor");
  // The centroid compensator: 3 centroids take the 24 prompt tokens evicted per head and one more
  // each decode step; slake with 40, most of them never seeded.
  cp.kv.compensate = "centroids";
  cp.kv.centroids = 3;
  compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 5), 3, "llama-gqa-tied cake+centroids");
  cp = params(96, "slake", 12, 4);
  cp.kv.compensate = "centroids";
  cp.kv.centroids = 40;
  compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 8), 3, "llama-gqa-tied slake+centroids");
  // slake-wide: the window widened to C/2 = 6 on both backends (resolve_kv_defaults).
  compare(*m, params(96, "slake-wide", 12, 4), prompt_tokens(40, m->cfg.n_vocab, 6), 3, "llama-gqa-tied slake-wide");
  // Fewer observing queries than the window keeps: the last 3 of slake-wide's window of 8 (C=16)
  // score the prompt and weigh the layers.
  cp = params(96, "slake-wide", 16, 4);
  cp.kv.observe = 3;
  compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 7), 3, "llama-gqa-tied slake-wide --kv-observe 3");
}

// --prefill-chunk: each chunk a prompt into what the chunks before it kept (staged with the chunk's
// rows, scored by its last queries, each layer's budget capped by the rows it holds), as the CPU
// takes it; held tokens, budgets and KV bytes must agree. A 56-token prompt at C=12 (window 4) in
// chunks of 12 (the first evicts nothing, as its 12 tokens fit C + window) and of 20. Chunks take
// many more decisions than one pass, and bf16 activations flip near-ties among them, so all but
// the first are compared with fp32 activations, where the decisions must be identical.
TEST(DeviceContext, PrefillInChunksMatchesCpu) {
  const auto m = fixture("llama-gqa-tied");
  const std::vector<int32_t> prompt = prompt_tokens(56, m->cfg.n_vocab, 9);
  for (const char* policy : {"slake", "snapkv", "pyramidkv", "streaming", "cake"}) {
    ContextParams cp = params(96, policy, 12, 4);
    cp.kv.prefill_chunk = 12;
    compare(*m, cp, prompt, 3, std::string("llama-gqa-tied ") + policy + " chunks of 12", std::string(policy) == "slake");
  }
  ContextParams cp = params(96, "snapkv", 12, 4);
  cp.kv.prefill_chunk = 20;  // the first chunk evicts too
  compare(*m, cp, prompt, 3, "llama-gqa-tied snapkv chunks of 20", false);
  cp = params(96, "cake", 12, 4);
  cp.kv.prefill_chunk = 12;
  cp.kv.compensate = "taylor";  // later chunks attend through the state earlier chunks filled
  compare(*m, cp, prompt, 3, "llama-gqa-tied cake+taylor chunks of 12", false);
  cp.kv.compensate = "centroids";
  cp.kv.centroids = 3;
  compare(*m, cp, prompt, 3, "llama-gqa-tied cake+centroids chunks of 12", false);
  // Chunks of 4: the second to fourth fit C + window with what the chunks before kept, so they evict
  // nothing and are placed whole, in alternate halves of the pool; the fifth evicts.
  cp = params(96, "snapkv", 12, 4);
  cp.kv.prefill_chunk = 4;
  compare(*m, cp, std::vector<int32_t>(prompt.begin(), prompt.begin() + 20), 3, "llama-gqa-tied snapkv 20 tokens in chunks of 4", false);
  cp = params(96, "slake-wide", 12, 4);  // a window of 6: the chunks are two windows
  cp.kv.prefill_chunk = 12;
  compare(*m, cp, prompt, 3, "llama-gqa-tied slake-wide chunks of 12", false);
  // Local layers staged with the chunk and trimmed to their window; soft-capped logits; fp32
  // activations, as for every model with local layers.
  for (const char* name : {"gemma3-swa", "gemma2-softcap"}) {
    const auto g = fixture(name);
    cp = params(96, "slake", 12, 4);
    cp.kv.prefill_chunk = 16;
    compare(*g, cp, prompt_tokens(56, g->cfg.n_vocab, 10), 3, std::string(name) + " slake chunks of 16", false);
  }
}

// The server's way: a prompt given chunk by chunk (eval_prompt_chunk) ends in the same cache and
// logits as eval's chunked prefill; a later chunk shorter than the window, or into a context
// planned without chunks, is refused.
TEST(DeviceContext, PromptChunkByChunkEqualsChunkedEval) {
  const auto m = fixture("llama-gqa-tied");
  ContextParams cp = params(96, "snapkv", 12, 4);
  cp.kv.prefill_chunk = 16;
  const std::vector<int32_t> prompt = prompt_tokens(50, m->cfg.n_vocab, 11);
  DeviceContext whole(*m, cp), steps(*m, cp);
  std::vector<float> want, got;
  whole.eval(prompt, &want);
  for (int t0 = 0, len = 0; t0 < 50; t0 += len) {
    len = prefill_chunk_length(steps.plan().kv, t0, 50);
    steps.eval_prompt_chunk(std::vector<int32_t>(prompt.begin() + t0, prompt.begin() + t0 + len), t0 + len == 50 ? &got : nullptr);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(steps.budgets(), whole.budgets());
  EXPECT_EQ(steps.kv_bytes_used(), whole.kv_bytes_used());
  EXPECT_THROW(steps.eval_prompt_chunk({1, 2}, nullptr), slake::Error);
  // A context planned without chunks has no room for a later chunk's layers: refused, not overrun.
  DeviceContext plain(*m, params(96, "snapkv", 12, 4));
  plain.eval_prompt_chunk(std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), nullptr);
  EXPECT_THROW(plain.eval_prompt_chunk(std::vector<int32_t>(prompt.begin() + 16, prompt.begin() + 32), nullptr), slake::Error);
}

TEST(DeviceContext, StoredCacheTypesMatchCpu) {
  // The synthetic "tiny" shape: head_dim 32, so q8_0 rows fit (the fixtures' head_dim is 8). The
  // CPU stores the same types; logits, decisions and KV bytes (kv_bytes_used) must agree. With bf16
  // activations a stored rounding step can change a slake decision, so that pass is for full only
  // (as cake's in OtherPoliciesMatchCpu).
  const auto m = make_synthetic_model("tiny", DType::F32, 11);
  const std::pair<KvType, KvType> types[] = {
      {KvType::F16, KvType::F16}, {KvType::BF16, KvType::BF16}, {KvType::Q8_0, KvType::Q8_0}, {KvType::Q8_0, KvType::F16}};
  for (const auto& [tk, tv] : types)
    for (const char* policy : {"full", "slake"}) {
      ContextParams cp = params(96, policy, std::string(policy) == "full" ? 0 : 16, 4);
      cp.kv.type_k = tk, cp.kv.type_v = tv;
      compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 9), 3,
              std::string("tiny ") + policy + " -ctk " + kv_type_name(tk) + " -ctv " + kv_type_name(tv),
              std::string(policy) == "full", kFp32ActivationsStoredTypes);
    }
}

// The recall store (--kv-recall-pages, docs/algorithm.md §9): every row eviction takes (at prefill,
// where the cascade evicts the layers seen so far again, and at each decode step) joins its layer's
// store on the device, and each decode step attends the pages its query ranks highest by their keys
// with the exact cache, as the CPU's RecallScore::Keys. 24 rows a head go to the store at prefill
// and one a step after, in pages of 4, of which 2 are recalled. Logits, decisions and KV bytes (the
// store's included) must agree; with fp32 activations, since a page choice near a tie moves the
// logits by O(1) where bf16 activations flip it, but where every page is recalled.
TEST(DeviceContext, RecallStoreMatchesCpu) {
  const auto m = fixture("llama-gqa-tied");
  for (const char* policy : {"snapkv", "cake"})
    for (const KvType st : {KvType::F32, KvType::F16, KvType::BF16}) {
      if (std::string(policy) == "cake" && st != KvType::F32) continue;  // the store's types: snapkv's
      ContextParams cp = params(96, policy, 12, 4);
      cp.kv.recall_pages = 2, cp.kv.recall_page = 4, cp.kv.store_type = st;
      compare(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 12), 6,
              std::string("llama-gqa-tied ") + policy + " recall 2 pages of 4, store " + kv_type_name(st), false,
              st == KvType::F32 ? kFp32Activations : kFp32ActivationsStoredTypes);
    }
  // Every page recalled (8 pages of 4 hold the 24 + 6 evicted rows): no choice to flip, so bf16
  // activations too (the pass a GPU runs).
  ContextParams all = params(96, "snapkv", 12, 4);
  all.kv.recall_pages = 16, all.kv.recall_page = 4, all.kv.store_type = KvType::F32;
  compare(*m, all, prompt_tokens(40, m->cfg.n_vocab, 12), 6, "llama-gqa-tied snapkv every page recalled");
  // Local and global layers (Gemma 3): only the layers the policy manages have stores.
  const auto gm = fixture("gemma3-swa");
  ContextParams gp = params(96, "snapkv", 12, 4);
  gp.kv.recall_pages = 2, gp.kv.recall_page = 4, gp.kv.store_type = KvType::F32;
  compare(*gm, gp, prompt_tokens(40, gm->cfg.n_vocab, 14), 6, "gemma3-swa snapkv recall 2 pages of 4", false);
  // A q8_0 store, f16 cache: the tiny shape's head_dim of 32.
  const auto t = make_synthetic_model("tiny", DType::F32, 11);
  ContextParams cp = params(96, "snapkv", 16, 4);
  cp.kv.type_k = cp.kv.type_v = KvType::F16;
  cp.kv.recall_pages = 3, cp.kv.recall_page = 4, cp.kv.store_type = KvType::Q8_0;
  compare(*t, cp, prompt_tokens(40, t->cfg.n_vocab, 13), 6, "tiny snapkv recall 3 pages of 4, store q8_0", false,
          kFp32ActivationsStoredTypes);
}

// A prompt in chunks with a recall store: in each attention call of a chunk after the first, the last
// kChunkRecallTokens (32) tokens choose their own pages one by one, as decode steps, and their
// queries choose each KV head's pages for the rows before them, which attend them with the exact
// rows, as the CPU's chunk_pages. Calls of 36 tokens (4 rows attend what the last 32 chose), of 8
// (two of the CPU's blocks), of 4 and of 1 (each token its own choice); snapkv and cake;
// Gemma 3's global layer;
// a q8_0 store under an f16 cache (the recalled rows are attended in the cache's type on the
// device, as f32 on the CPU: within the stored types' tolerance); every page recalled with bf16
// activations. fp32 activations otherwise, as for the decode steps above.
TEST(DeviceContext, RecallInPromptChunksMatchesCpu) {
  const auto m = fixture("llama-gqa-tied");
  auto chunked = [](const char* policy, int chunk, int n_batch, int pages) {
    ContextParams cp = params(96, policy, 12, 4, n_batch);
    cp.kv.recall_pages = pages, cp.kv.recall_page = 4, cp.kv.store_type = KvType::F32;
    cp.kv.prefill_chunk = chunk;
    return cp;
  };
  const std::vector<int32_t> prompt = prompt_tokens(80, m->cfg.n_vocab, 21);
  compare(*m, chunked("snapkv", 36, 64, 2), prompt, 3, "llama-gqa-tied snapkv recall 2 pages, chunks of 36", false);
  compare(*m, chunked("snapkv", 17, 8, 2), prompt, 3, "llama-gqa-tied snapkv recall 2 pages, chunks of 17 in calls of 8", false);
  compare(*m, chunked("cake", 36, 64, 3), prompt, 3, "llama-gqa-tied cake recall 3 pages, chunks of 36", false);
  compare(*m, chunked("snapkv", 36, 64, 64), prompt, 3, "llama-gqa-tied snapkv every page recalled, chunks of 36");
  const auto gm = fixture("gemma3-swa");
  compare(*gm, chunked("snapkv", 36, 64, 2), prompt_tokens(72, gm->cfg.n_vocab, 22), 3, "gemma3-swa snapkv recall 2 pages, chunks of 36",
          false);
  const auto t = make_synthetic_model("tiny", DType::F32, 11);
  ContextParams cp = chunked("snapkv", 36, 64, 3);
  cp.kv.budget = 16;
  cp.kv.type_k = cp.kv.type_v = KvType::F16;
  cp.kv.store_type = KvType::Q8_0;
  compare(*t, cp, prompt_tokens(80, t->cfg.n_vocab, 23), 3, "tiny snapkv recall 3 pages, store q8_0, chunks of 36", false,
          kFp32ActivationsStoredTypes);
}

// --kv-recall-every: a decode step's choice serves the steps after it while each of their query
// rows keeps the direction of the one that chose (RecallStore::holds_choice), and those steps
// attend it with the pages written since. The decode steps feed one token again and again, so
// that the queries of neighbouring steps stay close (a random model's greedy tokens turn them
// away at every step). The device's logits must agree with the CPU's holding its choices; for
// each setting the CPU's holding and its choosing at every step must differ, so that the holds
// change what is attended (a device that chose at every step would not match). Then a prompt
// chunk after decode steps (which drops the choices held, on both) and reset(). With fp32
// activations, as the other tests of page choices.
#if !SLAKE_KERNEL_TESTS_ON_GPU
TEST(DeviceContext, RecallHeldChoicesMatchCpu) {
  const int steps = 12;
  set_host_gemm_rounding(false);
  // Logits of the prompt and the decode steps (token `tok` each) on the CPU and the device.
  const auto run = [&](const Model& model, const ContextParams& cp, const std::vector<int32_t>& prompt, int32_t tok, bool device) {
    const std::unique_ptr<Model> ref = bf16_rounded(model);
    std::unique_ptr<Context> cpu = device ? nullptr : std::make_unique<Context>(*ref, cp);
    std::unique_ptr<DeviceContext> dev = device ? std::make_unique<DeviceContext>(model, cp) : nullptr;
    std::vector<float> logits, all;
    for (int s = 0; s <= steps; ++s) {
      const std::vector<int32_t> in = s == 0 ? prompt : std::vector<int32_t>{tok};
      if (dev) dev->eval(in, &logits);
      else cpu->eval(in, &logits);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  const auto check = [&](const Model& model, ContextParams cp, const std::vector<int32_t>& prompt, const std::string& what, Tolerance tol) {
    const int32_t tok = prompt.back();
    const std::vector<float> want = run(model, cp, prompt, tok, false), got = run(model, cp, prompt, tok, true);
    g_tol = tol;
    expect_logits_close(got, want, what);
    cp.kv.recall_every = 1;
    const std::vector<float> every_step = run(model, cp, prompt, tok, false);
    double moved = 0;
    for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::abs(static_cast<double>(want[i]) - every_step[i]));
    EXPECT_GT(moved, 1e-3) << what << ": no held choice changed a step's logits";
    std::printf("%s: the holds moved the logits by up to %.3g\n", what.c_str(), moved);
  };
  const auto m = fixture("llama-gqa-tied");
  ContextParams cp = params(96, "snapkv", 12, 4);
  cp.kv.recall_pages = 2, cp.kv.recall_page = 4, cp.kv.store_type = KvType::F32;
  for (const int every : {2, 4}) {
    cp.kv.recall_every = every;
    check(*m, cp, prompt_tokens(40, m->cfg.n_vocab, 12),
          "llama-gqa-tied snapkv recall 2 pages of 4, a choice held up to " + std::to_string(every) + " steps", kFp32Activations);
  }
  // A q8_0 store, f16 cache, a prompt in chunks.
  const auto t = make_synthetic_model("tiny", DType::F32, 11);
  ContextParams tp = params(96, "snapkv", 16, 4);
  tp.kv.type_k = tp.kv.type_v = KvType::F16;
  tp.kv.recall_pages = 3, tp.kv.recall_page = 4, tp.kv.store_type = KvType::Q8_0, tp.kv.recall_every = 3;
  tp.kv.prefill_chunk = 24;
  const std::vector<int32_t> prompt = prompt_tokens(48, t->cfg.n_vocab, 13);
  check(*t, tp, prompt, "tiny snapkv recall 3 pages of 4, store q8_0, held 3 steps, chunks of 24", kFp32ActivationsStoredTypes);
  // Decode steps, a prompt chunk, decode steps again; twice, with reset() between.
  const std::unique_ptr<Model> ref = bf16_rounded(*t);
  g_tol = kFp32ActivationsStoredTypes;
  Context cpu(*ref, tp);
  DeviceContext dev(*t, tp);
  for (int round = 0; round < 2; ++round) {
    cpu.reset();
    dev.reset();
    std::vector<float> want, got;
    cpu.eval(prompt, &want);
    dev.eval(prompt, &got);
    for (int part = 0; part < 2; ++part) {
      if (part == 1) {
        const std::vector<int32_t> chunk = prompt_tokens(8, t->cfg.n_vocab, 14);
        cpu.eval_prompt_chunk(chunk, &want);
        dev.eval_prompt_chunk(chunk, &got);
        expect_logits_close(got, want, "a prompt chunk after decode steps, round " + std::to_string(round));
      }
      for (int s = 0; s < 6; ++s) {
        cpu.eval({prompt.back()}, &want);
        dev.eval({prompt.back()}, &got);
        expect_logits_close(got, want, "round " + std::to_string(round) + " part " + std::to_string(part) + " step " + std::to_string(s));
      }
    }
  }
  set_host_gemm_rounding(true);
  g_tol = kBf16Activations;
}
#endif

TEST(DeviceContext, RecallTheDeviceLacksIsRefused) {
  const auto m = fixture("llama-gqa-tied");
  auto recall = [] {
    ContextParams cp = params(96, "snapkv", 12, 4);
    cp.kv.recall_pages = 2;
    cp.kv.store_type = KvType::F32;
    return cp;
  };
  std::vector<std::pair<std::string, ContextParams>> cases;
  ContextParams cp = recall();
  cp.kv.recall_score = RecallScore::Lowrank;
  cases.emplace_back("--kv-recall-score", cp);
  cp = recall();
  cp.kv.compensate = "taylor";
  cases.emplace_back("compensator", cp);
  cp = recall();
  cp.kv.store_file = "/tmp";
  cases.emplace_back("--kv-store-file", cp);
  for (const auto& [flag, p] : cases) {
    try {
      DeviceContext dev(*m, p);
      ADD_FAILURE() << flag << " was accepted";
    } catch (const slake::Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cpu backend"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceContext, CacheTypesTheDeviceLacksAreRefused) {
  const auto m = make_synthetic_model("tiny", DType::F32, 11);
  for (const KvType t : {KvType::Q4_0, KvType::KIVI2, KvType::KIVI4}) {
    ContextParams cp = params(32, "full", 0, 8);
    cp.kv.type_v = t;
    try {
      DeviceContext dev(*m, cp);
      ADD_FAILURE() << kv_type_name(t) << " was accepted";
    } catch (const slake::Error& e) {
      EXPECT_NE(std::string(e.what()).find("f32, f16, bf16 or q8_0"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceContext, ShortPromptThenDecodeEviction) {
  // A prompt within C + Sw is kept whole; decode then evicts down to the budget.
  const auto m = fixture("llama2-mha");
  compare(*m, params(64, "slake", 12, 4), prompt_tokens(10, m->cfg.n_vocab, 5), 10, "llama2-mha slake short prompt");
}

TEST(DeviceContext, MultiTokenDecodeAndReset) {
  const auto m = fixture("llama-gqa-tied");
  const auto ref = bf16_rounded(*m);
  for (const char* policy : {"full", "slake"}) {
    const ContextParams cp = params(96, policy, 12, 4, 8);
    Context cpu(*ref, cp);
    DeviceContext dev(*m, cp);
    std::vector<float> want, got;
    for (int round = 0; round < 2; ++round) {  // the second round after reset() must match too
      cpu.reset();
      dev.reset();
      const std::vector<int32_t> p = prompt_tokens(30, m->cfg.n_vocab, 6), more = prompt_tokens(5, m->cfg.n_vocab, 7);
      cpu.eval(p, &want);
      dev.eval(p, &got);
      expect_logits_close(got, want, std::string(policy) + " prompt");
      cpu.eval(more, &want, true);  // several tokens after the prompt
      dev.eval(more, &got, true);
      expect_logits_close(got, want, std::string(policy) + " 5 tokens at once");
    }
  }
}

TEST(DeviceContext, Stories260K) {
  SLAKE_STORIES_OR_SKIP(dir);
  const auto m = load_model(dir + "stories260K.gguf");
  const std::vector<int32_t> p = prompt_tokens(64, m->cfg.n_vocab, 8);
  compare(*m, params(128, "full", 0, 8, 64), p, 3, "stories260K full");
  compare(*m, params(128, "slake", 24, 8, 64), p, 3, "stories260K slake C=24");
}

TEST(DeviceContext, BadInputIsRefused) {
  const auto m = fixture("llama2-mha");
  DeviceContext dev(*m, params(32, "full", 0, 8));
  EXPECT_THROW(dev.eval({}, nullptr), slake::Error);
  EXPECT_THROW(dev.eval({m->cfg.n_vocab}, nullptr), slake::Error);
  EXPECT_THROW(dev.eval(std::vector<int32_t>(33, 1), nullptr), slake::Error);
  EXPECT_THROW(DeviceContext(*m, params(32, "h2o", 12, 4)), slake::Error);
  EXPECT_THROW(DeviceContext(*m, params(32, "ahakv", 12, 4)), slake::Error);
  ContextParams cake_aha = params(32, "cake", 12, 4);
  cake_aha.kv.selector = "ahakv";
  EXPECT_THROW(DeviceContext(*m, cake_aha), slake::Error);
  ContextParams sre = params(32, "slake", 12, 4);
  sre.kv.sre_mass = 0.9;
  EXPECT_THROW(DeviceContext(*m, sre), slake::Error);
  EXPECT_THROW(DeviceContext(*m, params(-1, "full", 0, 8)), slake::Error);
}

// Contexts that share one upload of the weights (a server's slots, a sweep's sessions) compute
// what a context with its own copy does; the weights are uploaded once while any holds them, and
// their arenas plan no weights. Contexts of one layout share their activations too (their arenas
// plan none): a context keeps nothing there between calls, so another context's prompt between a
// context's prompt and its decode step changes nothing.
TEST(DeviceContext, SharedWeightsMatchOwnWeights) {
  const auto m = fixture("qwen2-bias");
  const std::vector<int32_t> prompt = prompt_tokens(40, m->cfg.n_vocab, 5), other = prompt_tokens(33, m->cfg.n_vocab, 6);
  std::vector<float> own_logits, own_step, a_logits, a_step, b_logits;
  {
    DeviceContext own(*m, params(96, "slake", 12, 4));
    own.eval(prompt, &own_logits);
    own.eval({3}, &own_step);
  }
  auto w = shared_device_weights(*m);
  EXPECT_EQ(shared_device_weights(*m).get(), w.get());
  DeviceContext a(*m, params(96, "slake", 12, 4), w), b(*m, params(96, "snapkv", 16, 4), w);
  EXPECT_EQ(a.plan().group_bytes("weights"), 0u);
  const DevicePlan alone(*m, params(96, "slake", 12, 4), /*with_weights=*/false);
  EXPECT_EQ(a.plan().activation_bytes(), alone.group_bytes("activations"));
  EXPECT_GT(a.plan().activation_bytes(), 0u);
  EXPECT_EQ(a.plan().total_bytes() + a.plan().activation_bytes(), alone.total_bytes());
  EXPECT_EQ(a.plan().activation_layout(), b.plan().activation_layout());
  EXPECT_EQ(a.peak_device_bytes(), a.plan().total_bytes() + w->bytes() + a.plan().activation_bytes());
  EXPECT_GE(w->bytes(), DevicePlan(*m, params(96, "full", 0, 4)).group_bytes("weights"));
  b.eval(other, &b_logits);  // another context's use of the weights and activations in between
  a.eval(prompt, &a_logits);
  b.reset();
  b.eval(other, &b_logits);  // a prompt, and a decode step
  b.eval({5}, &b_logits);
  a.eval({3}, &a_step);
  EXPECT_EQ(a_logits, own_logits);
  EXPECT_EQ(a_step, own_step);
  const DeviceWeights* first = w.get();
  w.reset();
  EXPECT_EQ(shared_device_weights(*m).get(), first);  // a and b still hold it
}

// Logits of a context stepped with others against its own step's: equal under emulation (the host
// GEMM computes each row alone); on a GPU within the bf16 tolerance, since cuBLAS may sum a GEMM of
// several rows in another order.
void expect_same_step(const std::vector<float>& got, const std::vector<float>& want, const ModelConfig& c, const std::string& what) {
#if SLAKE_KERNEL_TESTS_ON_GPU
  g_tol = Tolerance{kBf16Activations.abs, 0.01 * c.n_layers, false};
  expect_logits_close(got, want, what);
#else
  (void)c;
  EXPECT_EQ(got, want) << what;
#endif
}

int32_t greedy(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Contexts stepped together (DeviceContext::decode_batch) compute what each computes alone: their
// rows share the GEMMs, and each row's KV hooks and attention run on its own cache. Five contexts
// of different policies and prompt lengths (a full cache, snapkv with a recall store, slake with
// its compensator, cake, streaming) with n_batch 2, so that they go in groups of 2, 2 and 1, on
// Llama; the first three, in groups of 2 and 1, on Gemma 3, whose local layers trim their
// windows; through greedy decode steps in which every evicting context evicts. Under emulation
// the host GEMM computes each row alone, so the logits, the tokens held and the KV bytes must be
// identical to the last bit. On a GPU a GEMM over several rows may sum in another order: the
// logits within the bf16 tolerance, on the Llama fixture only (Gemma 3's decode scores have
// near-ties that such a difference can flip).
TEST(DeviceContext, DecodeBatchEqualsOneByOne) {
  const std::vector<std::string> models = SLAKE_KERNEL_TESTS_ON_GPU ? std::vector<std::string>{"llama-gqa-tied"}
                                                                    : std::vector<std::string>{"llama-gqa-tied", "gemma3-swa"};
  for (const std::string& name : models) {
    const auto m = fixture(name);
    const auto w = shared_device_weights(*m);
    std::vector<ContextParams> cps{params(48, "full", 0, 4, 2), params(48, "snapkv", 12, 4, 2), params(48, "slake", 12, 4, 2),
                                   params(48, "cake", 12, 4, 2), params(48, "streaming", 12, 4, 2)};
    cps[1].kv.recall_pages = 2, cps[1].kv.recall_page = 4, cps[1].kv.store_type = KvType::F32;
    if (name == "gemma3-swa") cps.resize(3);  // groups of 2 and 1: the emulated Gemma is the slow one
    const size_t n = cps.size();
    std::vector<std::unique_ptr<DeviceContext>> together, alone;
    std::vector<DeviceContext*> batch;
    std::vector<int32_t> next(n);
    for (size_t i = 0; i < n; ++i) {
      together.push_back(std::make_unique<DeviceContext>(*m, cps[i], w));
      alone.push_back(std::make_unique<DeviceContext>(*m, cps[i], w));
      const std::vector<int32_t> prompt = prompt_tokens(12 + 5 * static_cast<int>(i), m->cfg.n_vocab, 30 + static_cast<uint32_t>(i));
      std::vector<float> a, b;
      together[i]->eval(prompt, &a);
      alone[i]->eval(prompt, &b);
      next[i] = greedy(a);
      batch.push_back(together[i].get());
    }
    for (int step = 0; step < 4; ++step) {
      std::vector<std::vector<float>> got;
      DeviceContext::decode_batch(batch, next, &got);
      ASSERT_EQ(got.size(), n);
      for (size_t i = 0; i < n; ++i) {
        const std::string what = name + " " + cps[i].kv.policy + " step " + std::to_string(step);
        std::vector<float> want;
        alone[i]->eval({next[i]}, &want);
        expect_same_step(got[i], want, m->cfg, what);
#if !SLAKE_KERNEL_TESTS_ON_GPU
        for (int l = 0; l < m->cfg.n_layers; ++l) EXPECT_EQ(together[i]->layer_tokens_held(l), alone[i]->layer_tokens_held(l)) << what;
        EXPECT_EQ(together[i]->kv_bytes_used(), alone[i]->kv_bytes_used()) << what;
        EXPECT_EQ(together[i]->kv_store_bytes(), alone[i]->kv_store_bytes()) << what;
        EXPECT_EQ(together[i]->kv_peak_bytes(), alone[i]->kv_peak_bytes()) << what;
#endif
        EXPECT_EQ(together[i]->n_past(), alone[i]->n_past()) << what;
        next[i] = greedy(got[i]);
      }
    }
    EXPECT_LT(together[1]->tokens_held(), static_cast<int64_t>(12 + 5 + 4) * m->cfg.n_layers * m->cfg.n_kv_heads) << name << ": nothing evicted";
    EXPECT_GT(together[1]->kv_store_bytes(), 0u) << name << ": nothing stored";
  }
}

// Sessions (slake/session.h): decode_sessions steps cuda sessions of one model together, and
// sessions of two backends one after another; either way each gets its own eval's logits.
TEST(DeviceContext, DecodeSessionsStepsCudaSessionsTogether) {
  const auto m = fixture("llama-gqa-tied");
  const ContextParams full = params(96, "full", 0, 4), snap = params(96, "snapkv", 12, 4);
  CudaSession a(*m, full), b(*m, snap), a1(*m, full), b1(*m, snap);
  CpuSession cpu(*m, full);
  std::vector<float> l;
  for (Session* s : std::vector<Session*>{&a, &b, &a1, &b1, &cpu}) s->eval(prompt_tokens(30, m->cfg.n_vocab, 40), &l);
  std::vector<std::vector<float>> got;
  EXPECT_TRUE(a.decode_together({&a, &b}, {5, 7}, &got));
  EXPECT_FALSE(a.decode_together({&a, &cpu}, {5, 7}, &got));  // nothing evaluated
  EXPECT_EQ(a.n_past(), 31);
  std::vector<float> want;
  a1.eval({5}, &want, false);
  expect_same_step(got[0], want, m->cfg, "a");
  b1.eval({7}, &want, false);
  expect_same_step(got[1], want, m->cfg, "b");
  decode_sessions({&a, &b, &cpu}, {1, 2, 3}, &got);  // mixed: one after another
  a1.eval({1}, &want, false);
  expect_same_step(got[0], want, m->cfg, "a");
  b1.eval({2}, &want, false);
  expect_same_step(got[1], want, m->cfg, "b");
  decode_sessions({&b, &a}, {4, 4}, &got);  // together again
  b1.eval({4}, &want, false);
  expect_same_step(got[0], want, m->cfg, "b");
  a1.eval({4}, &want, false);
  expect_same_step(got[1], want, m->cfg, "a");
  EXPECT_EQ(a.n_past(), 33);
  EXPECT_EQ(b.n_past(), 33);
}

TEST(DeviceContext, DecodeBatchBadInputIsRefused) {
  const auto m = fixture("llama2-mha");
  const auto w = shared_device_weights(*m);
  DeviceContext a(*m, params(32, "full", 0, 8), w), b(*m, params(32, "full", 0, 8), w), own(*m, params(32, "full", 0, 8)),
      empty(*m, params(32, "full", 0, 8), w);
  std::vector<float> l;
  for (DeviceContext* d : {&a, &b, &own}) d->eval(prompt_tokens(4, m->cfg.n_vocab, 50), &l);
  auto refused = [&](const std::vector<DeviceContext*>& ctxs, const std::vector<int32_t>& tokens, const std::string& why) {
    try {
      DeviceContext::decode_batch(ctxs, tokens, nullptr);
      ADD_FAILURE() << why << ": accepted";
    } catch (const slake::Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused({}, {}, "no sequences");
  refused({&a, &b}, {1}, "2 contexts but 1 tokens");
  refused({&a, &a}, {1, 1}, "appears twice");
  refused({&a, &own}, {1, 1}, "does not share");
  refused({&a, &empty}, {1, 1}, "holds no prompt");
  DeviceContext longer(*m, params(48, "full", 0, 8), w);
  longer.eval(prompt_tokens(4, m->cfg.n_vocab, 50), &l);
  refused({&a, &longer}, {1, 1}, "another context size");
  refused({&a, &b}, {1, m->cfg.n_vocab}, "outside the vocabulary");
  EXPECT_EQ(a.n_past(), 4);
  EXPECT_EQ(b.n_past(), 4);
}

#if !SLAKE_KERNEL_TESTS_ON_GPU
TEST(DevicePlan, TooLargeForTheDeviceIsRefusedBeforeAllocating) {
  const auto m = fixture("llama2-mha");
  const ContextParams cp = params(4096, "full", 0, 8);
  const DevicePlan plan(*m, cp);
  set_emulated_memory(plan.total_bytes() - 1);
  try {
    DeviceContext dev(*m, cp);
    ADD_FAILURE() << "a plan one byte over the device was accepted";
  } catch (const slake::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("4096 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MiB free"), std::string::npos) << msg;
  }
  set_emulated_memory(plan.total_bytes());
  EXPECT_NO_THROW(DeviceContext(*m, cp));
  set_emulated_memory(0);
}
#endif

TEST(DevicePlan, EvictionPlansTheBudgetNotTheContext) {
  const auto m = fixture("llama2-mha");
  const DevicePlan full(*m, params(8192, "full", 0, 8)), slake(*m, params(8192, "slake", 64, 8));
  const ModelConfig& c = m->cfg;
  const size_t slot = static_cast<size_t>(c.n_kv_heads) * c.head_dim * sizeof(float);
  EXPECT_EQ(full.pool_slots, int64_t{8192} * c.n_layers);
  EXPECT_EQ(slake.pool_slots, int64_t{64 + 8 + 1} * c.n_layers);
  EXPECT_GE(full.group_bytes("kv"), 2 * slot * 8192 * c.n_layers);
  // The pool follows the budget: doubling the context doubles full's cache, not slake's pool.
  const DevicePlan full2(*m, params(16384, "full", 0, 8)), slake2(*m, params(16384, "slake", 64, 8));
  auto bytes = [](const DevicePlan& p, const char* name) {
    for (const auto& e : p.entries())
      if (e.name == name) return e.bytes;
    return size_t{0};
  };
  EXPECT_EQ(bytes(full2, "kv.k"), 2 * bytes(full, "kv.k"));
  EXPECT_EQ(bytes(slake2, "kv.k"), bytes(slake, "kv.k"));
  EXPECT_EQ(full.group_bytes("weights"), slake.group_bytes("weights"));
  size_t sum = 0;
  for (const auto& e : full.entries()) sum = std::max(sum, e.offset + e.bytes);
  EXPECT_LE(sum, full.total_bytes());
}

}  // namespace
}  // namespace slake::gpu::test
