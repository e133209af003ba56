// decode_batch (batch_decode.h): several sequences decoded in one step give each the logits it gets
// decoded alone through Context::eval, bit for bit (every matmul row is a one-row product), under
// the full cache and under evicting policies (their decode eviction and linear state run per
// context). The sequences differ in prompt length, so they sit at different positions, and some
// steps leave a sequence out, as a server does when one finishes.
#include <memory>
#include <random>

#include "slake/batch_decode.h"
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

// More sequences than one matmul call takes (kMatmulExactRows), on a quantised synthetic model.
TEST(BatchDecode, SyntheticQ8ManySequencesEqualSingle) {
  const auto m = make_synthetic_model("tiny", DType::Q8_0, 3);
  check_batched_equals_single(*m, KvPolicyParams{}, 18, 6);
  check_batched_equals_single(*m, policy("snapkv", 24, 8), 18, 6);
}

TEST(BatchDecode, RefusesBadBatches) {
  const auto m = make_synthetic_model("tiny", DType::F32, 3);
  ThreadPool pool(1), other(1);
  ContextParams p;
  p.n_ctx = 8;
  p.pool = &pool;
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
