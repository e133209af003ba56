#include "slake/kv/kv_cache.h"

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

void KvHead::load_keys(int j0, int rows, int d, float* dst) const {
  if (kivi_k.active()) kivi_k.load(j0, rows, dst);
  else kv_load_rows(type_k, key_row(j0), dst, rows, d);
}

void KvHead::load_values(int j0, int rows, int d, float* dst) const {
  if (kivi_v.active()) kivi_v.load(j0, rows, dst);
  else kv_load_rows(type_v, value_row(j0), dst, rows, d);
}

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, int capacity, int centroids, KvType type_k, KvType type_v,
                 RecallConfig recall)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), capacity_(capacity),
      centroids_(centroids), type_k_(type_k), type_v_(type_v), kivi_(kv_is_kivi(type_k) || kv_is_kivi(type_v)),
      recall_(recall) {
  if (recall.on() && centroids > 0) fail("a recall store takes no centroid compensator (the Taylor state or none)");
  check_kv_type(type_k, head_dim, "KV cache key type");
  check_kv_type(type_v, head_dim, "KV cache value type");
  heads_.resize(static_cast<size_t>(n_layers) * n_kv_heads);
  // Reserved, not touched: pages are committed as tokens arrive, so resident memory follows use.
  const size_t k_row = kv_is_kivi(type_k) ? 0 : kv_row_bytes(type_k, head_dim);
  const size_t v_row = kv_is_kivi(type_v) ? 0 : kv_row_bytes(type_v, head_dim);
  try {
    for (KvHead& h : heads_) {
      h.lin = LinearState(head_dim, centroids);
      if (recall.on()) h.recall = RecallStore(head_dim, recall.page, recall.type, recall.score, recall.file_dir);
      h.type_k = type_k;
      h.type_v = type_v;
      h.k_row = k_row;
      h.v_row = v_row;
      if (kv_is_kivi(type_k)) h.kivi_k = KiviRows(true, kv_kivi_bits(type_k), head_dim);
      if (kv_is_kivi(type_v)) h.kivi_v = KiviRows(false, kv_kivi_bits(type_v), head_dim);
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

size_t KvCache::head_bytes(int head_dim, KvType type_k, KvType /*type_v*/) {
  return kv_is_kivi(type_k) ? KiviRows::bound_bytes(true, head_dim, 0) : 0;
}

size_t KvCache::planned_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity, KvType type_k, KvType type_v) {
  return static_cast<size_t>(n_layers) * n_kv_heads *
         (static_cast<size_t>(capacity) * token_bytes(head_dim, type_k, type_v) + head_bytes(head_dim, type_k, type_v));
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
    if (kh.kivi_k.active()) kh.kivi_k.append(kp);
    else kv_store_row(type_k_, kp, kh.k.data() + n * kh.k_row, head_dim_);
    if (kh.kivi_v.active()) kh.kivi_v.append(vp);
    else kv_store_row(type_v_, vp, kh.v.data() + n * kh.v_row, head_dim_);
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
    h.kivi_k.clear();
    h.kivi_v.clear();
    h.n = 0;
    h.lin.clear();
    h.recall.clear();
  }
  held_ = lin_heads_ = store_bytes_ = 0;
  peak_bytes_ = 0;
}

void KvCache::compact(int layer, int h, const std::vector<char>& keep, bool absorb, bool store) {
  note_compacted(compact_head(layer, h, keep, absorb, store));
}

void KvCache::drop_before(int layer, int32_t min_pos) {
  for (int h = 0; h < n_kv_heads_; ++h) {
    const KvHead& kh = head(layer, h);
    std::vector<char> keep(static_cast<size_t>(kh.n));
    int dropped = 0;
    for (int r = 0; r < kh.n; ++r) dropped += !(keep[static_cast<size_t>(r)] = kh.pos[static_cast<size_t>(r)] >= min_pos);
    if (dropped > 0) compact(layer, h, keep, false);
  }
}

void KvCache::note_compacted(const KvCompaction& c) {
  held_ -= c.removed;
  if (c.new_lin) ++lin_heads_;
  store_bytes_ += c.stored;
  note_usage();
}

KvCompaction KvCache::compact_head(int layer, int h, const std::vector<char>& keep, bool absorb, bool store) {
  KvHead& kh = head(layer, h);
  const bool had_lin = kh.lin.n > 0;
  store = store && kh.recall.active();
  const size_t store_before = kh.recall.bytes();
  thread_local std::vector<float> ks, vs;
  ks.resize(static_cast<size_t>(head_dim_));
  vs.resize(static_cast<size_t>(head_dim_));
  // Each run of kept rows moves down in one call: a decode step evicts one row, so the rows
  // after it are one run, not a call per row.
  int w = 0;
  for (int r = 0; r < kh.n;) {
    if (!keep[static_cast<size_t>(r)]) {
      if (absorb || store) {
        const float* kr = kh.key(r, head_dim_, ks.data());
        const float* vr = kh.value(r, head_dim_, vs.data());
        if (store) {
          kh.recall.add(kr, vr, kh.pos[static_cast<size_t>(r)]);
          // The Taylor state absorbs the row as the store holds it, so that subtracting the recalled
          // rows (algorithm.md §9.3) cancels exactly whatever the store's type.
          if (absorb) {
            kh.recall.load(kh.recall.n() - 1, ks.data(), vs.data());
            kh.lin.absorb(ks.data(), vs.data());
          }
        } else if (absorb) {
          kh.lin.absorb(kr, vr);
        }
      }
      ++r;
      continue;
    }
    int e = r + 1;
    while (e < kh.n && keep[static_cast<size_t>(e)]) ++e;
    const size_t rows = static_cast<size_t>(e - r);
    if (w != r) {  // k and v are empty where KIVI holds the rows (memmove from null is undefined)
      if (!kh.k.empty()) std::memmove(kh.k.data() + w * kh.k_row, kh.k.data() + r * kh.k_row, rows * kh.k_row);
      if (!kh.v.empty()) std::memmove(kh.v.data() + w * kh.v_row, kh.v.data() + r * kh.v_row, rows * kh.v_row);
      std::memmove(kh.pos.data() + w, kh.pos.data() + r, rows * sizeof(int32_t));
    }
    w += static_cast<int>(rows);
    r = e;
  }
  if (kh.kivi_k.active()) kh.kivi_k.compact(keep);
  if (kh.kivi_v.active()) kh.kivi_v.compact(keep);
  kh.k.resize(static_cast<size_t>(w) * kh.k_row);
  kh.v.resize(static_cast<size_t>(w) * kh.v_row);
  kh.pos.resize(static_cast<size_t>(w));
  const KvCompaction c{kh.n - w, !had_lin && kh.lin.n > 0, static_cast<int64_t>(kh.recall.bytes()) - static_cast<int64_t>(store_before)};
  kh.n = w;
  return c;
}

void KvCache::settle(int layer) {
  if (!kivi_) return;
  for (int h = 0; h < n_kv_heads_; ++h) {
    KvHead& kh = head(layer, h);
    kh.kivi_k.settle();
    kh.kivi_v.settle();
  }
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

bool KvCache::can_truncate() const {
  if (kivi_) return false;
  const int n = heads_.empty() ? 0 : heads_[0].n;
  // Rows are kept in increasing position order (appends in order, compaction keeps it), so a
  // head of n rows from position 0 to n - 1 holds exactly 0, 1, ..., n - 1.
  for (const KvHead& h : heads_) {
    if (h.n != n || h.lin.n != 0 || h.recall.n() != 0) return false;
    if (n > 0 && (h.pos.front() != 0 || h.pos.back() != n - 1)) return false;
  }
  return true;
}

bool KvCache::truncate(int n) {
  if (n < 0 || !can_truncate() || (!heads_.empty() && heads_[0].n < n)) return false;
  for (KvHead& h : heads_) {
    h.n = n;
    h.k.resize(static_cast<size_t>(n) * h.k_row);
    h.v.resize(static_cast<size_t>(n) * h.v_row);
    h.pos.resize(static_cast<size_t>(n));
  }
  held_ = static_cast<int64_t>(n) * static_cast<int64_t>(heads_.size());
  note_usage();
  return true;
}

int64_t KvCache::tokens_held() const { return held_; }

size_t KvCache::bytes_used() const {
  const size_t lin = static_cast<size_t>(lin_heads_) * LinearState(head_dim_, centroids_).bytes() + store_bytes_used();
  if (!kivi_) return static_cast<size_t>(held_) * token_bytes(head_dim_, type_k_, type_v_) + lin;
  size_t n = lin;
  for (const KvHead& h : heads_)
    n += (h.kivi_k.active() ? h.kivi_k.bytes() : static_cast<size_t>(h.n) * h.k_row) +
         (h.kivi_v.active() ? h.kivi_v.bytes() : static_cast<size_t>(h.n) * h.v_row) + static_cast<size_t>(h.n) * sizeof(int32_t);
  return n;
}

size_t KvCache::bytes_allocated() const {
  size_t n = 0;
  for (const KvHead& h : heads_)
    n += h.k.capacity() + h.v.capacity() + h.pos.capacity() * sizeof(int32_t) + h.kivi_k.bytes_allocated() + h.kivi_v.bytes_allocated();
  return n;
}

}  // namespace slake
