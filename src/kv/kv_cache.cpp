#include "slake/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "slake/error.h"

namespace slake {

const float* KvHead::f32_rows(KvType t, const uint8_t* p, int d) {
  if (t != KvType::F32) fail(std::string("internal: fp32 rows asked of a ") + kv_type_name(t) + " cache (" + std::to_string(d) + " values)");
  return reinterpret_cast<const float*>(p);
}

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, int capacity, int centroids, KvType type_k, KvType type_v)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), capacity_(capacity),
      centroids_(centroids), type_k_(type_k), type_v_(type_v) {
  check_kv_type(type_k, head_dim, "KV cache key type");
  check_kv_type(type_v, head_dim, "KV cache value type");
  heads_.resize(static_cast<size_t>(n_layers) * n_kv_heads);
  // Reserved, not touched: pages are committed as tokens arrive, so resident memory follows use.
  const size_t k_row = kv_row_bytes(type_k, head_dim), v_row = kv_row_bytes(type_v, head_dim);
  try {
    for (KvHead& h : heads_) {
      h.lin = LinearState(head_dim, centroids);
      h.type_k = type_k;
      h.type_v = type_v;
      h.k_row = k_row;
      h.v_row = v_row;
      h.k.reserve(static_cast<size_t>(capacity) * k_row);
      h.v.reserve(static_cast<size_t>(capacity) * v_row);
      h.pos.reserve(static_cast<size_t>(capacity));
    }
  } catch (const std::bad_alloc&) {
    fail("cannot reserve a KV cache of " + std::to_string(capacity) + " tokens (" +
         std::to_string(planned_bytes(n_layers, n_kv_heads, head_dim, capacity, type_k, type_v) >> 20) + " MiB)");
  }
}

size_t KvCache::token_bytes(int head_dim, KvType type_k, KvType type_v) {
  return kv_row_bytes(type_k, head_dim) + kv_row_bytes(type_v, head_dim) + sizeof(int32_t);
}

size_t KvCache::planned_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity, KvType type_k, KvType type_v) {
  return static_cast<size_t>(n_layers) * n_kv_heads * capacity * token_bytes(head_dim, type_k, type_v);
}

void KvCache::append(int layer, const float* k, const float* v, int32_t pos) {
  for (int h = 0; h < n_kv_heads_; ++h) {
    KvHead& kh = head(layer, h);
    if (kh.n >= capacity_) fail("KV cache full: " + std::to_string(capacity_) + " tokens per head");
    const float* kp = k + static_cast<size_t>(h) * head_dim_;
    const float* vp = v + static_cast<size_t>(h) * head_dim_;
    const size_t n = static_cast<size_t>(kh.n);
    kh.k.resize((n + 1) * kh.k_row);
    kh.v.resize((n + 1) * kh.v_row);
    kh.pos.resize(n);
    kv_store_row(type_k_, kp, kh.k.data() + n * kh.k_row, head_dim_);
    kv_store_row(type_v_, vp, kh.v.data() + n * kh.v_row, head_dim_);
    kh.pos.push_back(pos);
    ++kh.n;
  }
  held_ += n_kv_heads_;
  note_usage();
}

void KvCache::note_usage() { peak_bytes_ = std::max(peak_bytes_, bytes_used()); }

void KvCache::clear() {
  for (KvHead& h : heads_) {
    h.k.clear();
    h.v.clear();
    h.pos.clear();
    h.n = 0;
    h.lin.clear();
  }
  held_ = lin_heads_ = 0;
  peak_bytes_ = 0;
}

void KvCache::compact(int layer, int h, const std::vector<char>& keep, bool absorb) {
  KvHead& kh = head(layer, h);
  const bool had_lin = kh.lin.n > 0;
  thread_local std::vector<float> ks, vs;
  ks.resize(static_cast<size_t>(head_dim_));
  vs.resize(static_cast<size_t>(head_dim_));
  // Each run of kept rows moves down in one call: a decode step evicts one row, so the rows
  // after it are one run, not a call per row.
  int w = 0;
  for (int r = 0; r < kh.n;) {
    if (!keep[static_cast<size_t>(r)]) {
      if (absorb) kh.lin.absorb(kh.key(r, head_dim_, ks.data()), kh.value(r, head_dim_, vs.data()));
      ++r;
      continue;
    }
    int e = r + 1;
    while (e < kh.n && keep[static_cast<size_t>(e)]) ++e;
    const size_t rows = static_cast<size_t>(e - r);
    if (w != r) {
      std::memmove(kh.k.data() + w * kh.k_row, kh.k.data() + r * kh.k_row, rows * kh.k_row);
      std::memmove(kh.v.data() + w * kh.v_row, kh.v.data() + r * kh.v_row, rows * kh.v_row);
      std::memmove(kh.pos.data() + w, kh.pos.data() + r, rows * sizeof(int32_t));
    }
    w += static_cast<int>(rows);
    r = e;
  }
  kh.k.resize(static_cast<size_t>(w) * kh.k_row);
  kh.v.resize(static_cast<size_t>(w) * kh.v_row);
  kh.pos.resize(static_cast<size_t>(w));
  held_ -= kh.n - w;
  kh.n = w;
  if (!had_lin && kh.lin.n > 0) ++lin_heads_;
  note_usage();
}

namespace {
// madvise(MADV_DONTNEED) on the whole pages between v's size and its capacity: they read back as
// zeros if the vector grows into them again, and stop counting as resident now.
template <typename T>
void release_tail(std::vector<T>& v) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(v.data() + v.size()) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(v.data() + v.capacity()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}
}  // namespace

void KvCache::release_unused(int layer, int h) {
  KvHead& kh = head(layer, h);
  release_tail(kh.k);
  release_tail(kh.v);
  release_tail(kh.pos);
}

int64_t KvCache::tokens_held() const { return held_; }

size_t KvCache::bytes_used() const {
  return static_cast<size_t>(held_) * token_bytes(head_dim_, type_k_, type_v_) +
         static_cast<size_t>(lin_heads_) * LinearState(head_dim_, centroids_).bytes();
}

size_t KvCache::bytes_allocated() const {
  size_t n = 0;
  for (const KvHead& h : heads_) n += h.k.capacity() + h.v.capacity() + h.pos.capacity() * sizeof(int32_t);
  return n;
}

}  // namespace slake
