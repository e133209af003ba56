// A server slot's cache reuse (tools/server/slot.cpp) on stories260K: a request that continues a
// slot's history under the same resolved KV policy prefills only what is new; a request under any
// other policy, or one that does not continue the history, gets an emptied cache and the tokens a
// fresh slot gives. The scheduler's loop is played by hand: prefill, then one eval per token.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "../../tools/common/end_of_generation.h"
#include "../../tools/server/slot.h"
#include "slake/cpu/thread_pool.h"
#include "slake/kv/kv_policy.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"
#include "test_util.h"

namespace slake::server {
namespace {

struct Served {
  std::vector<int32_t> ids;  // the tokens the reply sampled
  std::string text;          // the reply's text
  int n_cached = 0;          // prompt tokens the slot's cache already held
};

class SlotReuse : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_STORIES_OR_SKIP(dir);
    model_ = load_model(dir + "stories260K.gguf");
    tokenizer_ = std::make_unique<Tokenizer>(model_->vocab);
    eog_ = tools::end_of_generation_tokens(model_->vocab);
    grammar_vocab_ = std::make_unique<GrammarVocabSource>(*tokenizer_, eog_);
    pool_ = std::make_unique<ThreadPool>(1);
  }
  std::unique_ptr<Slot> slot(const KvPolicyParams& kv) {
    return std::make_unique<Slot>(0, *model_, *tokenizer_, eog_, *grammar_vocab_, 256, *pool_, kv, "cpu", cache_);
  }
  KvPolicyParams policy(const std::string& name, int budget, int window, int observe = 0) const {
    KvPolicyParams p;
    p.policy = name;
    p.budget = budget;
    p.window = window;
    p.observe = observe;
    return resolve_kv_policy(p, false, &model_->cfg);
  }
  GenRequest request(const std::vector<int32_t>& prompt, const KvPolicyParams& kv, int max_tokens = 8) const {
    GenRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temp = 0.0f;  // greedy
    r.ignore_eos = true;
    r.top_logprobs = 0;  // every sampled token then comes back in a piece, whether or not its text is held
    r.kv = kv;
    return r;
  }
  // One request through the slot, as the scheduler steps it.
  Served serve(Slot& s, const GenRequest& r, const PrefixSource& from = {}) {
    auto task = std::make_shared<Task>(r);
    s.start(task, 0, ++now_, from);
    while (s.prefilling()) s.prefill(16);
    std::vector<float> logits;
    while (s.decoding()) {
      s.session().eval({s.pending()}, &logits);
      s.decoded(logits);
    }
    EXPECT_TRUE(s.finished());
    s.release();
    std::vector<Piece> pieces;
    EXPECT_TRUE(task->take(pieces, std::chrono::milliseconds(0)));
    EXPECT_EQ(task->error(), "");
    Served out;
    for (const Piece& p : pieces) out.ids.insert(out.ids.end(), p.ids.begin(), p.ids.end()), out.text += p.text;
    out.n_cached = task->n_cached();
    return out;
  }
  std::vector<int32_t> prompt(const std::string& text) const { return tokenizer_->tokenize(text, true, true); }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unordered_set<int32_t> eog_;
  std::unique_ptr<GrammarVocabSource> grammar_vocab_;
  std::unique_ptr<ThreadPool> pool_;
  PromptCache cache_{size_t{1} << 30};
  uint64_t now_ = 0;
};

TEST_F(SlotReuse, AContinuationUnderTheSamePolicyPrefillsOnlyWhatIsNew) {
  const KvPolicyParams full = policy("full", 0, 32);
  auto s = slot(full);
  const std::vector<int32_t> first = prompt("Once upon a time, there was a little girl named Lily.");
  const Served a = serve(*s, request(first, full));
  EXPECT_EQ(a.n_cached, 0);
  ASSERT_EQ(a.ids.size(), 8u);

  // The next turn: the history (prompt and reply, the last token not yet evaluated) and more.
  std::vector<int32_t> next = first;
  next.insert(next.end(), a.ids.begin(), a.ids.end());
  const std::vector<int32_t> more = tokenizer_->tokenize(" She liked to play.", false, true);
  next.insert(next.end(), more.begin(), more.end());
  EXPECT_EQ(s->reusable(request(next, full)), s->history_size());
  EXPECT_EQ(s->history_size(), static_cast<int>(first.size() + a.ids.size() - 1));
  const Served b = serve(*s, request(next, full));
  EXPECT_EQ(b.n_cached, static_cast<int>(first.size() + a.ids.size() - 1));
  EXPECT_EQ(b.ids.size(), 8u);
  // (Its tokens are not compared with a fresh slot's: a prompt prefilled in other pieces may round
  // differently, as slot.h says.)

  // Not a continuation: the prompt differs inside the history, or is the history itself. The full
  // cache is then cut back to the common prefix, on a multiple of kReevaluate and leaving at least
  // that many tokens to prefill.
  std::vector<int32_t> other = next;
  other[20] = other[20] == 5 ? 6 : 5;
  EXPECT_EQ(s->reusable(request(other, full)), std::min(20, static_cast<int>(other.size()) - kReevaluate) / 16 * 16);
  const std::vector<int32_t> same(next.begin(), next.begin() + s->history_size());
  EXPECT_EQ(s->reusable(request(same, full)), static_cast<int>(same.size() - kReevaluate) / 16 * 16);
  EXPECT_EQ(usable_prefix({1, 2, 3}, {1, 2, 3}, false), 0);  // an evicting policy's cache is not cut
}

// A prompt that shares a prefix with what a slot holds (an edited last message, another user
// after the same system prompt, a regenerated reply) takes that prefix, from the slot's own cache
// or from another's, and gives the tokens a fresh slot gives; what the slot held goes to the
// prompt cache, from which a third prompt takes it back.
TEST_F(SlotReuse, ASharedPrefixIsCutBackToAndGivesAFreshSlotsTokens) {
  const KvPolicyParams full = policy("full", 0, 32);
  const std::vector<int32_t> system = prompt(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and "
      "her dog, who was big and brown.");
  const auto with = [&](const std::string& text) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> more = tokenizer_->tokenize(text, false, true);
    p.insert(p.end(), more.begin(), more.end());
    return p;
  };
  const std::vector<int32_t> p1 = with(" One day, Lily found a red ball under a big tree."), p2 = with(" Tom had a cat.");
  auto a = slot(full);
  serve(*a, request(p1, full));
  const Served b = serve(*a, request(p2, full, 12));
  EXPECT_EQ(b.n_cached, static_cast<int>(std::min(system.size(), p2.size() - kReevaluate)) / 16 * 16);
  EXPECT_GT(b.n_cached, 16);
  auto fresh = slot(full);
  EXPECT_EQ(b.ids, serve(*fresh, request(p2, full, 12)).ids);
  // p1's history went to the prompt cache; its regeneration takes most of it back from there.
  ASSERT_GE(cache_.entries(), 1u);
  int usable = 0;
  const CachedPrompt* e = cache_.find(p1, full, &usable);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(usable, static_cast<int>(p1.size() - kReevaluate) / 16 * 16);
  auto c = slot(full);
  const Served again = serve(*c, request(p1, full, 12), PrefixSource{nullptr, e, &e->tokens, usable});
  EXPECT_EQ(again.n_cached, usable);
  auto fresh1 = slot(full);
  EXPECT_EQ(again.ids, serve(*fresh1, request(p1, full, 12)).ids);
  // Another slot's live cache is a source too.
  auto d = slot(full);
  const int from_a = a->reusable(request(p1, full));
  EXPECT_GT(from_a, 16);
  const Served live = serve(*d, request(p1, full, 12), PrefixSource{&a->session(), nullptr, &a->history(), from_a});
  EXPECT_EQ(live.n_cached, from_a);
  EXPECT_EQ(live.ids, again.ids);
}

// Under an evicting policy nothing can be cut from a compressed prompt, but the state its prefill
// left is saved with its logits: an identical prompt (a regenerated reply) takes it whole, prefills
// nothing and gives the tokens a fresh slot gives.
TEST_F(SlotReuse, AnEvictingPolicysPromptIsTakenWholeByAnIdenticalOne) {
  const KvPolicyParams slake = policy("slake", 24, 8);
  const std::vector<int32_t> p = prompt(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and "
      "her dog, who was big and brown and liked to run after the ball every day.");
  ASSERT_GT(p.size(), 48u);
  auto a = slot(slake);
  const Served first = serve(*a, request(p, slake, 12));
  int usable = 0;
  const CachedPrompt* e = cache_.find(p, slake, &usable);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(usable, static_cast<int>(p.size()));
  EXPECT_FALSE(e->logits.empty());
  EXPECT_LT(e->state->kv.tokens_held(), static_cast<int64_t>(p.size()) * model_->cfg.n_layers * model_->cfg.n_kv_heads)
      << "nothing was evicted: the test would not cover a compressed prompt";
  auto b = slot(slake);
  const Served again = serve(*b, request(p, slake, 12), PrefixSource{nullptr, e, &e->tokens, usable});
  EXPECT_EQ(again.n_cached, static_cast<int>(p.size()));
  EXPECT_EQ(again.ids, first.ids);
  // One token more or less is another prompt: nothing of it is served.
  std::vector<int32_t> shorter(p.begin(), p.end() - 1);
  EXPECT_EQ(cache_.find(shorter, slake, &usable), nullptr);
  EXPECT_EQ(usable, 0);
}

// A request that extends another slot's history (a prompt still being prefilled or decoded
// beside it) takes nothing from it under an evicting policy: it must be prefilled whole, as a
// fresh request is. A full cache shares its cut prefix.
TEST_F(SlotReuse, OnlyACacheThatCanBeCutIsSharedWithAnotherRequest) {
  const std::vector<int32_t> p = prompt(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.");
  std::vector<int32_t> longer = p;
  const std::vector<int32_t> more = tokenizer_->tokenize(" One day she found a red ball under a big tree.", false, true);
  longer.insert(longer.end(), more.begin(), more.end());
  for (const KvPolicyParams& kv : {policy("snapkv", 16, 4), policy("full", 0, 32)}) {
    SCOPED_TRACE(kv.policy);
    auto s = slot(kv);
    auto task = std::make_shared<Task>(request(p, kv, 4));
    s->start(task, 0, ++now_);
    while (s->prefilling()) s->prefill(16);
    ASSERT_EQ(s->history_size(), static_cast<int>(p.size()));
    EXPECT_EQ(s->reusable(request(longer, kv)), static_cast<int>(p.size()));  // its own continuation
    EXPECT_EQ(s->shareable(request(longer, kv)), kv.evicts() ? 0 : cut_prefix(p, longer));
    s->release();
  }
  EXPECT_GT(cut_prefix(p, longer), 0);
}

// A token whose text is held back (here: every token, since the reply so far is always the start of
// the stop string) still comes back with its id, in order, when no log probabilities are asked for.
TEST_F(SlotReuse, TokensWhoseTextIsHeldStillReturnTheirIds) {
  const KvPolicyParams full = policy("full", 0, 32);
  auto s = slot(full);
  const std::vector<int32_t> p = prompt("Once upon a time");
  GenRequest r = request(p, full);
  const Served plain = serve(*s, r);
  ASSERT_EQ(plain.ids.size(), 8u);
  ASSERT_FALSE(plain.text.empty());
  r.top_logprobs = -1;
  r.stop = {plain.text + "\x01"};  // never reached: the reply ends by length, its text held to the end
  auto fresh = slot(full);
  EXPECT_EQ(serve(*fresh, r).ids, plain.ids);
}

// Two requests that differ in one field of the KV policy: the second must not run on the cache
// and evictor the first left, and gives what a fresh slot gives.
TEST_F(SlotReuse, EveryPolicyFieldDecidesReuse) {
  const std::vector<int32_t> first =
      prompt("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends "
             "and her dog, who was big and brown and liked to run after the ball.");
  ASSERT_GT(first.size(), 40u);
  const KvPolicyParams base = policy("snapkv", 24, 8, 0);
  const std::vector<std::pair<std::string, KvPolicyParams>> variants = {
      {"kv_observe", policy("snapkv", 24, 8, 4)},
      {"kv_window", policy("snapkv", 24, 12, 0)},
      {"kv_budget", policy("snapkv", 28, 8, 0)},
      {"kv_policy", policy("cake", 24, 8, 0)},
  };
  for (const auto& [field, kv] : variants) {
    SCOPED_TRACE(field);
    ASSERT_NE(kv, base);
    auto s = slot(base);
    const Served a = serve(*s, request(first, base));
    std::vector<int32_t> next = first;
    next.insert(next.end(), a.ids.begin(), a.ids.end());
    next.push_back(first[3]);
    EXPECT_EQ(s->reusable(request(next, base)), s->history_size());  // the same policy would reuse it
    EXPECT_EQ(s->reusable(request(next, kv)), 0);
    const Served b = serve(*s, request(next, kv));
    EXPECT_EQ(b.n_cached, 0);
    auto fresh = slot(kv);
    EXPECT_EQ(b.ids, serve(*fresh, request(next, kv)).ids);
  }
}

}  // namespace
}  // namespace slake::server
