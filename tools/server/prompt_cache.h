// The prompt cache, as llama-server's --cache-ram: when a slot moves on to a prompt that does not
// extend what it holds, its state is saved here, so that a later request sharing a prefix with it
// (a regenerated reply, an edited last message, another user after the same system prompt, the
// next turn of a conversation whose slot was taken) restores it instead of prefilling those tokens
// again. Bounded in bytes; the least recently used entries go first. The scheduler thread alone
// touches it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "slake/context.h"

namespace slake::server {

// Tokens of a prompt a freshly prefilled request evaluates itself, at least, when a cache is cut
// back for it: its last ones then go through the prefill's kernels as a fresh request's do.
constexpr int kReevaluate = 16;

// How many of `prompt`'s tokens a cache holding `held` serves: all of `held` when the prompt
// extends it; where the cache can be cut back (`cut`), the longest common prefix, leaving at least
// kReevaluate tokens to evaluate, rounded down to a multiple of kReevaluate. 0: none.
int usable_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt, bool cut);
// The prefix a cache that can be cut back serves when cut: the common prefix, leaving at least
// kReevaluate tokens, on a multiple of kReevaluate (0: none).
int cut_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt);

struct CachedPrompt {
  std::vector<int32_t> tokens;  // what the state holds, in order
  std::shared_ptr<const ContextState> state;
  bool cut = false;  // the state can be cut back (ContextState of a cache KvCache::can_truncate)
  // Not empty: the state is exactly what prefilling `tokens` as a prompt left (an evicting
  // policy's compressed cache included) and these are that prompt's last logits, so an identical
  // prompt takes it whole and samples from them: a fresh request's reply, nothing prefilled.
  std::vector<float> logits;
  uint64_t last_used = 0;
};

class PromptCache {
 public:
  // limit: bytes (0: the cache is off; SIZE_MAX: no limit).
  explicit PromptCache(size_t limit) : limit_(limit) {}
  bool on() const { return limit_ > 0; }
  // Saves a state (replacing one of the same tokens and policy); drops the least recently used
  // entries while over the limit. A state larger than the whole limit is not saved.
  void put(std::vector<int32_t> tokens, std::shared_ptr<const ContextState> state, bool cut, uint64_t now,
           std::vector<float> logits = {});
  // The entry serving the most of `prompt` under `kv`, and how many tokens (*usable); null: none.
  const CachedPrompt* find(const std::vector<int32_t>& prompt, const KvPolicyParams& kv, int* usable) const;
  void touch(const CachedPrompt* e, uint64_t now);
  bool drop_oldest(const CachedPrompt* keep = nullptr);  // the least recently used but `keep`; false: none
  size_t bytes() const { return bytes_; }
  size_t entries() const { return entries_.size(); }

 private:
  size_t limit_;
  size_t bytes_ = 0;
  std::list<CachedPrompt> entries_;
};

}  // namespace slake::server
