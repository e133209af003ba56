#include "prompt_cache.h"

#include <algorithm>

namespace slake::server {

namespace {
size_t common_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt) {
  const size_t n = std::min(held.size(), prompt.size());
  return static_cast<size_t>(std::mismatch(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n), prompt.begin()).first -
                             held.begin());
}
}  // namespace

int cut_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt) {
  if (prompt.size() <= static_cast<size_t>(kReevaluate)) return 0;
  // Cut on a multiple of kReevaluate: the kept rows then come from whole tiles of the prefill that
  // made them (a prompt's last piece, when shorter, goes through the one-row kernels).
  return static_cast<int>(std::min(common_prefix(held, prompt), prompt.size() - kReevaluate) / kReevaluate * kReevaluate);
}

int usable_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt, bool cut) {
  const size_t common = common_prefix(held, prompt);
  if (common == held.size() && common < prompt.size()) return static_cast<int>(common);
  return cut ? cut_prefix(held, prompt) : 0;
}

namespace {
size_t entry_bytes(const CachedPrompt& e) { return e.state->bytes() + e.logits.size() * sizeof(float); }
}  // namespace

void PromptCache::put(std::vector<int32_t> tokens, std::shared_ptr<const ContextState> state, bool cut, uint64_t now,
                      std::vector<float> logits) {
  if (!on() || !state || tokens.empty() || state->bytes() + logits.size() * sizeof(float) > limit_) return;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->tokens == tokens && it->state->params == state->params && it->logits.empty() == logits.empty()) {
      bytes_ -= entry_bytes(*it);
      entries_.erase(it);
      break;
    }
  entries_.push_back({std::move(tokens), std::move(state), cut, std::move(logits), now});
  bytes_ += entry_bytes(entries_.back());
  while (bytes_ > limit_ && drop_oldest()) {
  }
}

const CachedPrompt* PromptCache::find(const std::vector<int32_t>& prompt, const KvPolicyParams& kv, int* usable) const {
  const CachedPrompt* best = nullptr;
  *usable = 0;
  for (const CachedPrompt& e : entries_) {
    if (e.state->params != kv) continue;
    const int u = !e.logits.empty() && e.tokens == prompt ? static_cast<int>(prompt.size()) : usable_prefix(e.tokens, prompt, e.cut);
    if (u > *usable) best = &e, *usable = u;
  }
  return best;
}

void PromptCache::touch(const CachedPrompt* e, uint64_t now) {
  for (CachedPrompt& x : entries_)
    if (&x == e) x.last_used = now;
}

bool PromptCache::drop_oldest(const CachedPrompt* keep) {
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (&*it != keep && (oldest == entries_.end() || it->last_used < oldest->last_used)) oldest = it;
  if (oldest == entries_.end()) return false;
  bytes_ -= entry_bytes(*oldest);
  entries_.erase(oldest);
  return true;
}

}  // namespace slake::server
