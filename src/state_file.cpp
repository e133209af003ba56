#include "slake/state_file.h"

#include <cstring>

#include "slake/error.h"
#include "slake/state_archive.h"

namespace slake {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'A', 'K', 'E', 'S', 'T', 'A'};

constexpr uint64_t kFnvBasis = 1469598103934665603ull;

uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <class T>
uint64_t fnv1a_of(const T& x, uint64_t h) {
  return fnv1a(&x, sizeof x, h);
}

// The body (everything between the magic and the checksum), its checksum verified.
StateReader open(const std::string& bytes) {
  if (bytes.size() < sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t) || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    fail("not a slake state file (no SLAKESTA magic)");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof kMagic, sizeof version);
  if (version != kStateFileVersion)
    fail("state file version " + std::to_string(version) + "; this build reads version " + std::to_string(kStateFileVersion));
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + body, sizeof sum);
  if (fnv1a(bytes.data(), body) != sum) fail("state file: checksum mismatch (the file is damaged)");
  const size_t start = sizeof kMagic + sizeof version;
  return StateReader(bytes.data() + start, body - start);
}

void read_head(StateReader& r, StateFileHead& h) { r(h.model, h.n_ctx, h.n_batch, h.params, h.tokens); }

}  // namespace

uint64_t model_fingerprint(const Model& m) {
  uint64_t h = kFnvBasis;
  for (const std::string& t : m.vocab.tokens) h = fnv1a(t.data(), t.size(), fnv1a_of(t.size(), h));
  for (const TensorView* w : m.weights()) {
    h = fnv1a(w->name.data(), w->name.size(), h);
    h = fnv1a_of(w->type, fnv1a_of(w->nbytes, h));
    for (const int64_t d : w->ne) h = fnv1a_of(d, h);
    if (!w->data) continue;
    const size_t n = std::min<size_t>(w->nbytes, 256);
    h = fnv1a(w->data, n, h);
    h = fnv1a(w->data + (w->nbytes - n) / 2, n, h);
  }
  return h;
}

std::string write_state_file(const ContextState& s, const std::vector<int32_t>& tokens, uint64_t model) {
  StateWriter w;
  w.bytes().append(kMagic, sizeof kMagic);
  w(kStateFileVersion, model, s.n_ctx, s.n_batch, s.params, tokens, s.n_past, s.kv, s.evictor);
  const uint64_t sum = fnv1a(w.bytes().data(), w.bytes().size());
  w(sum);
  return std::move(w.bytes());
}

StateFileHead read_state_head(const std::string& bytes) {
  StateReader r = open(bytes);
  StateFileHead h;
  read_head(r, h);
  return h;
}

std::shared_ptr<const ContextState> read_state_file(const std::string& bytes, const Context& ctx, std::vector<int32_t>* tokens) {
  StateReader r = open(bytes);
  StateFileHead h;
  read_head(r, h);
  if (h.model != model_fingerprint(ctx.model())) fail("state file: saved with another model");
  if (h.n_ctx != ctx.n_ctx() || h.n_batch != ctx.params().n_batch || h.params != ctx.params().kv)
    fail("state file: saved from a context of " + std::to_string(h.n_ctx) + " tokens under another shape or KV policy than this one's (" +
         std::to_string(ctx.n_ctx()) + " tokens)");
  std::shared_ptr<ContextState> s = ctx.empty_state();
  const KvCache blank = s->kv;
  r(s->n_past, s->kv, s->evictor);
  if (r.left() != 0) fail("state file: " + std::to_string(r.left()) + " bytes after the state");
  // The shape the file claims must be this context's, and every head consistent with it: the
  // kernels index rows by these counts.
  const KvCache& kv = s->kv;
  if (kv.n_layers() != blank.n_layers() || kv.n_kv_heads() != blank.n_kv_heads() || kv.head_dim() != blank.head_dim() ||
      kv.capacity() != ctx.n_ctx() || kv.type_k() != blank.type_k() || kv.type_v() != blank.type_v())
    fail("state file: its cache's shape is not this context's");
  if (s->n_past < 0 || s->n_past > ctx.n_ctx() || static_cast<size_t>(s->n_past) != h.tokens.size())
    fail("state file: " + std::to_string(h.tokens.size()) + " tokens for a position of " + std::to_string(s->n_past));
  for (int l = 0; l < kv.n_layers(); ++l)
    for (int k = 0; k < kv.n_kv_heads(); ++k) {
      const KvHead& a = kv.head(l, k);
      const KvHead& b = blank.head(l, k);
      const bool rows_ok = a.type_k == b.type_k && a.type_v == b.type_v && a.k_row == b.k_row && a.v_row == b.v_row &&
                           a.n >= 0 && a.n <= s->n_past && a.pos.size() == static_cast<size_t>(a.n) &&
                           a.k.size() == static_cast<size_t>(a.n) * a.k_row && a.v.size() == static_cast<size_t>(a.n) * a.v_row;
      if (!rows_ok) fail("state file: layer " + std::to_string(l) + " head " + std::to_string(k) + " is not consistent");
    }
  s->model = &ctx.model();
  if (tokens) *tokens = std::move(h.tokens);
  return s;
}

}  // namespace slake
