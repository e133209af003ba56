#include "slake/kv_cache.h"

#include <cstring>

#include "slake/error.h"

namespace slake {

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, int capacity)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), capacity_(capacity) {
  heads_.resize(static_cast<size_t>(n_layers) * n_kv_heads);
  const size_t per = static_cast<size_t>(capacity) * head_dim;
  for (KvHead& h : heads_) {
    h.k.resize(per);
    h.v.resize(per);
    h.pos.resize(static_cast<size_t>(capacity));
  }
}

void KvCache::append(int layer, const float* k, const float* v, int32_t pos) {
  for (int h = 0; h < n_kv_heads_; ++h) {
    KvHead& kh = head(layer, h);
    if (kh.n >= capacity_) fail("KV cache full: " + std::to_string(capacity_) + " tokens per head");
    const size_t off = static_cast<size_t>(kh.n) * head_dim_;
    std::memcpy(kh.k.data() + off, k + static_cast<size_t>(h) * head_dim_, sizeof(float) * head_dim_);
    std::memcpy(kh.v.data() + off, v + static_cast<size_t>(h) * head_dim_, sizeof(float) * head_dim_);
    kh.pos[static_cast<size_t>(kh.n)] = pos;
    ++kh.n;
  }
}

void KvCache::clear() {
  for (KvHead& h : heads_) h.n = 0;
}

int64_t KvCache::tokens_held() const {
  int64_t n = 0;
  for (const KvHead& h : heads_) n += h.n;
  return n;
}

size_t KvCache::bytes_used() const {
  return static_cast<size_t>(tokens_held()) * (2 * sizeof(float) * head_dim_ + sizeof(int32_t));
}

size_t KvCache::bytes_allocated() const {
  size_t n = 0;
  for (const KvHead& h : heads_) n += (h.k.capacity() + h.v.capacity()) * sizeof(float) + h.pos.capacity() * sizeof(int32_t);
  return n;
}

}  // namespace slake
