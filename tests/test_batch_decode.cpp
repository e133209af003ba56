// decode_batch (batch_decode.h): several sequences decoded in one step give each the logits it gets
// decoded alone through Context::eval, bit for bit (every matmul row is a one-row product), under
// the full cache and under evicting policies (their decode eviction and linear state run per
// context). The sequences differ in prompt length, so they sit at different positions, and some
// steps leave a sequence out, as a server does when one finishes.
//
// prefill_shared: one prompt into several contexts with different policies leaves each exactly
// as its own eval(prompt) does (the kept tokens' bytes and positions, the linear states, the
// logits), and the decode that follows stays equal.
//
// Context::copy_state_from: a context that takes another's state after its prompt decodes on
// exactly as the original does (the server's n > 1 choices share one prefill this way), and the
// two stay independent. write_state_file / read_state_file carry the same state through bytes.
#include <memory>
#include <random>

#include "slake/batch_decode.h"
#include "slake/session.h"
#include "slake/state_file.h"
#include "slake/quant/dtype.h"
#include "slake/model/synthetic_model.h"
#include "test_util.h"

namespace slake {
namespace {

using test::error_of;

std::vector<int32_t> random_tokens(int n, int n_vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(1, n_vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

int32_t argmax(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// n_seq sequences, each prefilled alone, then `steps` greedy decode steps: batched contexts
// against reference contexts decoded one at a time. Sequence i sits out the steps where
// (step + i) % 5 == 4.
void check_batched_equals_single(const Model& m, const KvPolicyParams& kv, int n_seq, int steps) {
  ThreadPool pool(2);
  ContextParams p;
  p.n_ctx = 256;
  p.kv = kv;
  p.pool = &pool;
  std::mt19937 rng(7);
  std::vector<std::unique_ptr<Context>> batched, single;
  std::vector<int32_t> next(static_cast<size_t>(n_seq));
  std::vector<float> la, lb;
  for (int i = 0; i < n_seq; ++i) {
    batched.push_back(std::make_unique<Context>(m, p));
    single.push_back(std::make_unique<Context>(m, p));
    const std::vector<int32_t> prompt = random_tokens(30 + 9 * i, m.cfg.n_vocab, rng);
    batched.back()->eval(prompt, &la);
    single.back()->eval(prompt, &lb);
    ASSERT_EQ(la, lb);
    next[static_cast<size_t>(i)] = argmax(la);
  }
  int evicted_somewhere = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<Context*> ctxs;
    std::vector<int32_t> toks;
    std::vector<int> who;
    for (int i = 0; i < n_seq; ++i) {
      if ((step + i) % 5 == 4) continue;
      ctxs.push_back(batched[static_cast<size_t>(i)].get());
      toks.push_back(next[static_cast<size_t>(i)]);
      who.push_back(i);
    }
    std::vector<std::vector<float>> out;
    decode_batch(ctxs, toks, &out);
    ASSERT_EQ(out.size(), who.size());
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = static_cast<size_t>(who[j]);
      single[i]->eval({toks[j]}, &lb);
      ASSERT_EQ(out[j], lb) << "sequence " << i << " at step " << step;
      ASSERT_EQ(batched[i]->n_past(), single[i]->n_past());
      ASSERT_EQ(batched[i]->kv_cache().tokens_held(), single[i]->kv_cache().tokens_held());
      if (batched[i]->kv_cache().tokens_held() < static_cast<int64_t>(batched[i]->n_past()) * m.cfg.n_layers * m.cfg.n_kv_heads)
        ++evicted_somewhere;
      next[i] = argmax(out[j]);
    }
  }
  if (kv.evicts()) {
    EXPECT_GT(evicted_somewhere, 0) << "the policy never evicted: the test would not cover eviction";
  }
}

KvPolicyParams policy(const std::string& name, int budget, int window) {
  KvPolicyParams kv;
  kv.policy = name;
  kv.budget = budget;
  kv.window = window;
  return kv;
}

TEST(BatchDecode, StoriesFullCacheEqualsSingle) {
  SLAKE_STORIES_OR_SKIP(dir);
  const auto m = load_model(dir + "stories260K.gguf");
  check_batched_equals_single(*m, KvPolicyParams{}, 4, 24);
}

TEST(BatchDecode, StoriesEvictingPoliciesEqualSingle) {
  SLAKE_STORIES_OR_SKIP(dir);
  const auto m = load_model(dir + "stories260K.gguf");
  for (const char* name : {"slake", "h2o", "streaming"}) {
    SCOPED_TRACE(name);
    check_batched_equals_single(*m, policy(name, 24, 8), 4, 24);
  }
}

// The real model's quantised weights (Q4_1, packed for the CPU kernels).
TEST(BatchDecode, SmolLM2EqualsSingle) {
  SLAKE_REAL_MODEL_OR_SKIP(path, "SmolLM2-135M-Instruct.Q4_1.gguf");
  const auto m = load_model(path);
  check_batched_equals_single(*m, KvPolicyParams{}, 8, 6);
}

// Each family's layer definition through the batched path: the Qwen2 (biases), Qwen3 (QK norm),
// Gemma 3 (local and global layers), Gemma 2 (soft-capped logits), Phi-3 (fused tensors, LongRoPE) and the two mixtures of experts
// (Mixtral, Qwen3-MoE: each sequence's rows routed on their own) fixtures, full and evicting.
TEST(BatchDecode, FamilyFixturesEqualSingle) {
  for (const char* name : {"qwen2-bias", "qwen3-qknorm", "gemma3-swa", "gemma2-softcap", "phi3-longrope", "mixtral-moe", "qwen3-moe",
                           "qwen2-moe"}) {
    SCOPED_TRACE(name);
    const auto m = load_model(test::fixtures_dir() + "/models/" + name + "/model.gguf");
    check_batched_equals_single(*m, KvPolicyParams{}, 4, 12);
    check_batched_equals_single(*m, policy("slake", 24, 8), 4, 12);
  }
}

// More sequences than one matmul call takes (kMatmulExactRows), on a quantised synthetic model.
TEST(BatchDecode, SyntheticQ8ManySequencesEqualSingle) {
  const auto m = make_synthetic_model("tiny", DType::Q8_0, 3);
  check_batched_equals_single(*m, KvPolicyParams{}, 18, 6);
  check_batched_equals_single(*m, policy("snapkv", 24, 8), 18, 6);
}

// Every head of every layer holds the same tokens, bytes and linear state in a and b.
void expect_same_cache(const Context& a, const Context& b) {
  const KvCache& x = a.kv_cache();
  const KvCache& y = b.kv_cache();
  ASSERT_EQ(x.tokens_held(), y.tokens_held());
  for (int l = 0; l < a.model().cfg.n_layers; ++l)
    for (int h = 0; h < a.model().cfg.n_kv_heads; ++h) {
      const KvHead& p = x.head(l, h);
      const KvHead& q = y.head(l, h);
      ASSERT_EQ(p.pos, q.pos) << "layer " << l << " head " << h;
      ASSERT_EQ(p.k, q.k);
      ASSERT_EQ(p.v, q.v);
      ASSERT_EQ(p.lin.n, q.lin.n);
      ASSERT_EQ(p.lin.ksum, q.lin.ksum);
      ASSERT_EQ(p.lin.M, q.lin.M);
      ASSERT_EQ(p.lin.ck, q.lin.ck);
      ASSERT_EQ(p.lin.cv, q.lin.cv);
    }
}

TEST(BatchDecode, PrefillSharedEqualsEachPrefill) {
  SLAKE_STORIES_OR_SKIP(dir);
  const auto m = load_model(dir + "stories260K.gguf");
  std::vector<KvPolicyParams> kvs = {KvPolicyParams{}, policy("slake", 24, 8), policy("h2o", 32, 8), policy("cake", 40, 8),
                                     policy("slake-wide", 48, 8), policy("streaming", 24, 8)};
  kvs[3].compensate = "centroids";
  kvs[5].compensate = "taylor";
  ThreadPool pool(2);
  std::vector<std::unique_ptr<Context>> shared, alone;
  std::vector<Context*> ptrs;
  for (const KvPolicyParams& kv : kvs) {
    ContextParams p;
    p.n_ctx = 256;
    p.n_batch = 32;  // the prompt is observed in several chunks
    p.kv = kv;
    p.pool = &pool;
    shared.push_back(std::make_unique<Context>(*m, p));
    alone.push_back(std::make_unique<Context>(*m, p));
    ptrs.push_back(shared.back().get());
  }
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = random_tokens(150, m->cfg.n_vocab, rng);
  std::vector<float> got, want;
  prefill_shared(ptrs, prompt, &got);
  for (size_t i = 0; i < kvs.size(); ++i) {
    SCOPED_TRACE(kvs[i].policy);
    alone[i]->eval(prompt, &want);
    ASSERT_EQ(got, want);
    ASSERT_EQ(shared[i]->n_past(), 150);
    ASSERT_EQ(shared[i]->evictor().budgets(), alone[i]->evictor().budgets());
    expect_same_cache(*shared[i], *alone[i]);
    if (kvs[i].evicts()) {
      EXPECT_LT(shared[i]->kv_cache().tokens_held(), 150LL * m->cfg.n_layers * m->cfg.n_kv_heads) << "nothing evicted";
    }
  }
  std::vector<std::vector<float>> step;
  for (int t = 0; t < 12; ++t) {
    decode_batch(ptrs, std::vector<int32_t>(kvs.size(), prompt[static_cast<size_t>(t)]), &step);
    for (size_t i = 0; i < kvs.size(); ++i) {
      alone[i]->eval({prompt[static_cast<size_t>(t)]}, &want);
      ASSERT_EQ(step[i], want) << kvs[i].policy << " at step " << t;
    }
  }
  for (size_t i = 0; i < kvs.size(); ++i) expect_same_cache(*shared[i], *alone[i]);
}

TEST(BatchDecode, CopiedStateDecodesAsTheOriginal) {
  SLAKE_STORIES_OR_SKIP(dir);
  const auto m = load_model(dir + "stories260K.gguf");
  std::vector<KvPolicyParams> kvs = {KvPolicyParams{}, policy("slake", 24, 8), policy("h2o", 32, 8), policy("ahakv", 32, 8),
                                     policy("cake", 40, 8), policy("streaming", 24, 8)};
  kvs[1].recall_pages = 2;  // evicted tokens kept in the recall store and attended by the query
  kvs[1].recall_page = 4;
  kvs[1].store_type = KvType::F32;
  kvs[4].compensate = "centroids";
  kvs[5].compensate = "taylor";
  kvs[5].type_k = kvs[5].type_v = KvType::F16;
  ThreadPool pool(2);
  std::mt19937 rng(13);
  const std::vector<int32_t> prompt = random_tokens(150, m->cfg.n_vocab, rng);
  for (const KvPolicyParams& kv : kvs) {
    SCOPED_TRACE(kv.policy);
    ContextParams p;
    p.n_ctx = 256;
    p.n_batch = 32;
    p.kv = kv;
    p.pool = &pool;
    Context orig(*m, p), copy(*m, p), fresh(*m, p);
    copy.eval(random_tokens(20, m->cfg.n_vocab, rng), nullptr);  // what the copy held before is replaced
    std::vector<float> a, b, c;
    orig.eval(prompt, &a);
    fresh.eval(prompt, nullptr);
    copy.copy_state_from(orig);
    ASSERT_EQ(copy.n_past(), orig.n_past());
    ASSERT_EQ(copy.evictor().budgets(), orig.evictor().budgets());
    expect_same_cache(copy, orig);
    if (kv.evicts()) {
      EXPECT_LT(copy.kv_cache().tokens_held(), 150LL * m->cfg.n_layers * m->cfg.n_kv_heads) << "nothing evicted";
    }
    // The two then take different tokens: each must decode as a context that prefilled alone.
    for (int t = 0; t < 16; ++t) {
      const int32_t x = prompt[static_cast<size_t>(t)], y = prompt[static_cast<size_t>(t + 40)];
      copy.eval({x}, &a);
      fresh.eval({x}, &b);
      ASSERT_EQ(a, b) << "step " << t;
      orig.eval({y}, &c);
    }
    expect_same_cache(copy, fresh);
    EXPECT_EQ(copy.kv_cache().bytes_used(), fresh.kv_cache().bytes_used());
  }
}

// A context saved to a state file and read into a fresh one decodes on bit for bit as the original,
// under every policy (recall stores, attention sums, linear states) and cache type (q8_0, KIVI).
TEST(BatchDecode, StateFileRoundTripsEveryPolicyAndCacheType) {
  SLAKE_STORIES_OR_SKIP(dir);
  const auto stories = load_model(dir + "stories260K.gguf");
  const auto tiny = make_synthetic_model("tiny", DType::Q8_0, 5);  // head dimension 32: q8_0 and KIVI rows
  std::vector<std::pair<const Model*, KvPolicyParams>> cases;
  for (KvPolicyParams kv : {KvPolicyParams{}, policy("slake", 24, 8), policy("h2o", 32, 8), policy("ahakv", 32, 8), policy("cake", 40, 8)}) {
    if (kv.policy == "slake") kv.recall_pages = 2, kv.recall_page = 4, kv.store_type = KvType::F32;
    if (kv.policy == "cake") kv.compensate = "centroids";
    cases.emplace_back(stories.get(), kv);
  }
  KvPolicyParams q8 = policy("slake", 40, 8), kivi = policy("streaming", 40, 8);
  q8.type_k = q8.type_v = KvType::Q8_0;
  kivi.type_k = kivi.type_v = KvType::KIVI4;
  kivi.compensate = "taylor";
  cases.emplace_back(tiny.get(), q8);
  cases.emplace_back(tiny.get(), kivi);
  ThreadPool pool(2);
  std::mt19937 rng(17);
  for (const auto& [m, kv] : cases) {
    SCOPED_TRACE(kv.policy + " " + kv_type_name(kv.type_k));
    ContextParams p;
    p.n_ctx = 256;
    p.n_batch = 32;
    p.kv = kv;
    p.pool = &pool;
    const std::vector<int32_t> prompt = random_tokens(150, m->cfg.n_vocab, rng);
    Context orig(*m, p), fresh(*m, p);
    std::vector<float> a, b;
    orig.eval(prompt, &a);
    const std::string bytes = write_state_file(*orig.save_state(), prompt, model_fingerprint(*m));
    std::vector<int32_t> tokens;
    fresh.restore_state(*read_state_file(bytes, fresh, &tokens));
    EXPECT_EQ(tokens, prompt);
    ASSERT_EQ(fresh.n_past(), orig.n_past());
    EXPECT_EQ(fresh.kv_cache().bytes_used(), orig.kv_cache().bytes_used());
    if (kv.evicts()) {
      EXPECT_LT(fresh.kv_cache().tokens_held(), 150LL * m->cfg.n_layers * m->cfg.n_kv_heads) << "nothing evicted";
    }
    for (int t = 0; t < 12; ++t) {
      orig.eval({prompt[static_cast<size_t>(t)]}, &a);
      fresh.eval({prompt[static_cast<size_t>(t)]}, &b);
      ASSERT_EQ(a, b) << "step " << t;
    }
  }
}

// The refusal tests' set-up: a tiny model, contexts of 8 tokens on `pool`, and a second pool for
// the sets that mix pools.
class BatchRefusal : public ::testing::Test {
 protected:
  BatchRefusal() {
    p.n_ctx = 8;
    p.pool = &pool;
  }
  std::unique_ptr<Model> m = make_synthetic_model("tiny", DType::F32, 3);
  ThreadPool pool{1}, other{1};
  ContextParams p;
};

TEST_F(BatchRefusal, PrefillSharedRefusesBadSets) {
  Context a(*m, p), b(*m, p);
  ContextParams q = p;
  q.pool = &other;
  Context c(*m, q);
  ContextParams r = p;
  r.kv.type_k = KvType::Q8_0;
  Context d(*m, r);
  ContextParams s = p;
  s.n_batch = 4;
  Context e(*m, s);
  ContextParams small = p;
  small.n_ctx = 4;
  Context f(*m, small);
  EXPECT_NE(error_of([&] { prefill_shared({}, {1}, nullptr); }).find("no contexts"), std::string::npos);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &a}, {1}, nullptr); }).find("appears twice"), std::string::npos);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &c}, {1}, nullptr); }).find("one thread pool"), std::string::npos);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &d}, {1}, nullptr); }).find("another cache type"), std::string::npos);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &e}, {1}, nullptr); }).find("another n_batch"), std::string::npos);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &f}, {1, 2, 3, 4, 5}, nullptr); }).find("context full"), std::string::npos);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &b}, {1, -1}, nullptr); }).find("outside the vocabulary"), std::string::npos);
  b.eval({1}, nullptr);
  EXPECT_NE(error_of([&] { prefill_shared({&a, &b}, {1}, nullptr); }).find("already holds tokens"), std::string::npos);
  EXPECT_EQ(a.n_past(), 0);  // nothing changed by a refused set
  EXPECT_EQ(b.n_past(), 1);
}

TEST_F(BatchRefusal, CopyStateRefusesAnotherShape) {
  Context a(*m, p);
  ContextParams q = p;
  q.kv = policy("slake", 4, 2);
  Context b(*m, q);
  ContextParams r = p;
  r.n_ctx = 6;
  Context c(*m, r);
  const auto other = make_synthetic_model("tiny", DType::F32, 4);
  Context d(*other, p);
  a.eval({1, 2}, nullptr);
  EXPECT_NE(error_of([&] { b.copy_state_from(a); }).find("KV policy"), std::string::npos);
  EXPECT_NE(error_of([&] { c.copy_state_from(a); }).find("size"), std::string::npos);
  EXPECT_NE(error_of([&] { d.copy_state_from(a); }).find("one model"), std::string::npos);
  EXPECT_EQ(b.n_past(), 0);  // nothing changed by a refused copy
  CpuSession s(*m, p);
  EXPECT_TRUE(s.copy_state_from(CpuSession(*m, p)));
}

TEST_F(BatchRefusal, StateFileRefusesDamageAndOtherShapes) {
  Context a(*m, p);
  a.eval({1, 2, 3}, nullptr);
  const std::string bytes = write_state_file(*a.save_state(), {1, 2, 3}, model_fingerprint(*m));
  Context fresh(*m, p);
  std::vector<int32_t> tokens;
  EXPECT_NO_THROW(read_state_file(bytes, fresh, &tokens));
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_NE(error_of([&] { read_state_file(flipped, fresh, &tokens); }).find("checksum"), std::string::npos);
  EXPECT_NE(error_of([&] { read_state_file(bytes.substr(0, bytes.size() - 3), fresh, &tokens); }).find("checksum"), std::string::npos);
  EXPECT_NE(error_of([&] { read_state_file("GGUF" + bytes, fresh, &tokens); }).find("not a slake state file"), std::string::npos);
  const auto other = make_synthetic_model("tiny", DType::F32, 4);
  Context foreign(*other, p);
  EXPECT_NE(error_of([&] { read_state_file(bytes, foreign, &tokens); }).find("another model"), std::string::npos);
  ContextParams q = p;
  q.kv = policy("slake", 4, 2);
  Context policy_ctx(*m, q);
  EXPECT_NE(error_of([&] { read_state_file(bytes, policy_ctx, &tokens); }).find("KV policy"), std::string::npos);
  std::string later = bytes;
  later[8] = 9;  // the version
  EXPECT_NE(error_of([&] { read_state_file(later, fresh, &tokens); }).find("version 9"), std::string::npos);
}

TEST_F(BatchRefusal, RefusesBadBatches) {
  Context a(*m, p), b(*m, p);
  EXPECT_NE(error_of([&] { decode_batch({&a}, {1}, nullptr); }).find("holds no prompt"), std::string::npos);
  a.eval({1, 2, 3}, nullptr);
  b.eval({1, 2}, nullptr);
  EXPECT_NE(error_of([&] { decode_batch({&a, &a}, {1, 2}, nullptr); }).find("appears twice"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_batch({&a, &b}, {1}, nullptr); }).find("2 contexts but 1 tokens"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_batch({&a}, {-1}, nullptr); }).find("outside the vocabulary"), std::string::npos);
  ContextParams q = p;
  q.pool = &other;
  Context c(*m, q);
  c.eval({1}, nullptr);
  EXPECT_NE(error_of([&] { decode_batch({&a, &c}, {1, 1}, nullptr); }).find("one thread pool"), std::string::npos);
  for (int i = 0; i < 5; ++i) decode_batch({&a}, {1}, nullptr);
  EXPECT_EQ(a.n_past(), 8);
  EXPECT_NE(error_of([&] { decode_batch({&a, &b}, {1, 1}, nullptr); }).find("context full"), std::string::npos);
  EXPECT_EQ(b.n_past(), 2);  // nothing changed by a refused batch
}

}  // namespace
}  // namespace slake
