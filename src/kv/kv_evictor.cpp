#include "slake/kv/kv_evictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "slake/error.h"
#include "slake/kv/kv_ahakv.h"
#include "slake/kv/kv_budget.h"
#include "slake/kv/kv_scores.h"
#include "slake/kv/kv_sre.h"

namespace slake {

namespace {
std::vector<int> all_layers(int n) {
  std::vector<int> l(static_cast<size_t>(std::max(0, n)));
  std::iota(l.begin(), l.end(), 0);
  return l;
}
}  // namespace

KvEvictor::KvEvictor(const KvPolicyParams& p, int n_layers, const AttentionShape& s) : KvEvictor(p, all_layers(n_layers), s) {}

KvEvictor::KvEvictor(const KvPolicyParams& p, std::vector<int> layers, const AttentionShape& s)
    : p_(p), parts_(policy_parts(p)), n_layers_(static_cast<int>(layers.size())), layers_(std::move(layers)), s_(s) {
  validate(p);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int l = layers_[i];
    if (l < 0 || (i > 0 && l <= layers_[i - 1])) fail("internal: the managed layers must increase");
    slot_.resize(static_cast<size_t>(l) + 1, -1);
    slot_[static_cast<size_t>(l)] = static_cast<int>(i);
  }
  reset();
}

void KvEvictor::reset() {
  S_ = 0;
  prompt_evicts_ = false;
  continues_ = false;
  scores_.clear();
  budgets_.clear();
  decode_x_layer_ = -1;
  token_scores_.clear();
  // AhaKV's recent accumulation sums the last r queries: the policy's observing queries (Sobs or
  // the window, algorithm.md §2.3).
  const int recent = parts_.selector == KvSelector::AhaKv && p_.aha.recent ? p_.observed() : 0;
  sums_.assign(static_cast<size_t>(n_layers_), std::vector<AttentionSums>(static_cast<size_t>(s_.n_kv_heads), AttentionSums(recent)));
  sre_.assign(static_cast<size_t>(n_layers_), std::vector<std::vector<float>>(static_cast<size_t>(s_.n_kv_heads)));
  head_budgets_.clear();
}

void KvEvictor::prefill_sre(int m, int layer, int P, const KvCache& cache, ThreadPool& pool,
                            std::vector<std::vector<float>>& by_row) {
  // Each candidate's error against the state that would hold every candidate (on top of what the
  // head absorbed before), algorithm.md §2.8.
  pool.parallel_for(s_.n_kv_heads, 1, [&](int64_t lo, int64_t hi, int) {
    for (int64_t g = lo; g < hi; ++g) {
      const KvHead& kh = cache.head(layer, static_cast<int>(g));
      const int n_cand = rows_below(kh, P);
      std::vector<float>& e = sre_[static_cast<size_t>(m)][static_cast<size_t>(g)];
      e.resize(static_cast<size_t>(n_cand));
      self_recall_errors(kh, 0, n_cand, state_with_rows(kh, 0, n_cand, kh.lin, s_.head_dim), s_.head_dim, e.data(), s_.softcap);
      by_row[static_cast<size_t>(g)] = e;
    }
  });
  if (p_.sre_mass <= 0) return;
  // SRE-mass: each head's own budget, capped by the uniform one the memory is planned for.
  std::vector<int64_t>& hb = head_budgets_.emplace_back(static_cast<size_t>(s_.n_kv_heads));
  for (int g = 0; g < s_.n_kv_heads; ++g) {
    const std::vector<float>& e = sre_[static_cast<size_t>(m)][static_cast<size_t>(g)];
    hb[static_cast<size_t>(g)] = sre_mass_keep(e.data(), static_cast<int>(e.size()), p_.sre_mass, p_.sre_floor, p_.budget - p_.window);
  }
}

void KvEvictor::update_sre(int layer, int kvh, const KvHead& kh, int n_cand) {
  std::vector<float>& e = sre_[static_cast<size_t>(slot(layer))][static_cast<size_t>(kvh)];
  const int from = static_cast<int>(e.size());
  if (n_cand - from > 1) {
    // Several rows unscored at once (a prompt too short to evict at prefill): as prefill scores
    // its candidates, against the state that would hold all of them.
    e.resize(static_cast<size_t>(n_cand));
    self_recall_errors(kh, from, n_cand, state_with_rows(kh, from, n_cand, kh.lin, s_.head_dim), s_.head_dim, e.data() + from, s_.softcap);
    return;
  }
  // A row that left the window since: its error against the state with it absorbed.
  for (int r = from; r < n_cand; ++r) {
    float x = 0;
    self_recall_errors(kh, r, r + 1, state_with_rows(kh, r, r + 1, kh.lin, s_.head_dim), s_.head_dim, &x, s_.softcap);
    e.push_back(x);
  }
}

int64_t KvEvictor::head_budget(int m, int kvh, int64_t layer_budget) const {
  return m >= 0 && m < static_cast<int>(head_budgets_.size()) ? head_budgets_[static_cast<size_t>(m)][static_cast<size_t>(kvh)]
                                                                : layer_budget;
}

bool KvEvictor::uses_window() const {
  return parts_.selector == KvSelector::Indicator || parts_.selector == KvSelector::WindowMax7 || by_preference(parts_.allocator);
}

bool KvEvictor::accumulating() const {
  return parts_.selector == KvSelector::HeavyHitter || parts_.selector == KvSelector::AhaKv;
}

int64_t KvEvictor::gain_budget() const {
  return parts_.selector == KvSelector::AhaKv && p_.aha.gain ? p_.budget : 0;
}

void KvEvictor::track_rows(int m, int kvh, const KvHead& kh) {
  AttentionSums& a = sums_[static_cast<size_t>(m)][static_cast<size_t>(kvh)];
  if (a.rows() > kh.n) fail("internal: accumulated attention is out of step with the cache");
  a.grow(kh.n);
  if (parts_.selector != KvSelector::AhaKv || !p_.aha.value) return;
  thread_local std::vector<float> v;
  v.resize(static_cast<size_t>(s_.head_dim));
  for (int r = static_cast<int>(a.v2.size()); r < kh.n; ++r) {
    const float* x = kh.value(r, s_.head_dim, v.data());
    double n2 = 0;
    for (int i = 0; i < s_.head_dim; ++i) n2 += static_cast<double>(x[i]) * x[i];
    a.v2.push_back(static_cast<float>(n2));
  }
}

void KvEvictor::accumulated_scores(int m, int kvh, int n_cand, double* score) const {
  const AttentionSums& a = sums_[static_cast<size_t>(m)][static_cast<size_t>(kvh)];
  if (a.rows() < n_cand) fail("internal: accumulated attention has fewer rows than candidates");
  std::copy(a.sums(), a.sums() + n_cand, score);
  if (parts_.selector != KvSelector::AhaKv || !p_.aha.value) return;
  thread_local std::vector<double> prior;
  prior.resize(static_cast<size_t>(n_cand));
  value_prior(a.v2.data(), n_cand, prior.data());
  for (int j = 0; j < n_cand; ++j) score[j] *= prior[static_cast<size_t>(j)];
}

void KvEvictor::begin_prompt(int S, bool continues) {
  reset();
  S_ = S;
  continues_ = continues;
  prompt_evicts_ = p_.evicts() && S > static_cast<int64_t>(p_.budget) + p_.window;
  if (prompt_evicts_ && uses_window()) q_window_.assign(static_cast<size_t>(p_.observed()) * s_.n_heads * s_.head_dim, 0.0f);
}

void KvEvictor::observe(int layer, const float* q, const int32_t* pos, int n, const KvCache& cache, ThreadPool& pool) {
  // H2O accumulates from the first prompt token on, evicting or not: decode steps need the sums;
  // AhaKV with its recent part, only the last r queries.
  const int m = slot(layer);
  if (m < 0) return;
  if (accumulating() && p_.evicts()) accumulate_prompt(m, layer, q, pos, n, cache, pool);
  if (!prompt_evicts_ || !uses_window()) return;
  const size_t qd = static_cast<size_t>(s_.n_heads) * s_.head_dim;
  const int first = S_ - p_.observed();
  for (int t = 0; t < n; ++t)
    if (pos[t] >= first) std::copy(q + t * qd, q + (t + 1) * qd, q_window_.data() + (pos[t] - first) * qd);
}

void KvEvictor::accumulate_prompt(int m, int layer, const float* q, const int32_t* pos, int n, const KvCache& cache,
                                  ThreadPool& pool) {
  std::vector<AttentionSums>& sums = sums_[static_cast<size_t>(m)];
  for (int g = 0; g < s_.n_kv_heads; ++g) track_rows(m, g, cache.head(layer, g));
  std::vector<std::vector<double>> rows;
  auto add = [&](int32_t qpos) {
    for (int g = 0; g < s_.n_kv_heads; ++g) {
      std::vector<double>& r = rows[static_cast<size_t>(g)];
      sums[static_cast<size_t>(g)].add(r.data(), static_cast<int>(r.size()), qpos);
    }
  };
  if (parts_.selector == KvSelector::AhaKv && p_.aha.recent) {
    // One query at a time, each into its own slot of the ring.
    const size_t qd = static_cast<size_t>(s_.n_heads) * s_.head_dim;
    for (int t = 0; t < n; ++t) {
      if (pos[t] < S_ - p_.observed()) continue;
      rows.clear();
      accumulate_attention(q + t * qd, pos + t, 1, cache, layer, s_, rows, pool, gain_budget());
      add(pos[t]);
    }
    return;
  }
  accumulate_attention(q, pos, n, cache, layer, s_, rows, pool, gain_budget());
  add(pos[n - 1]);
}

void KvEvictor::on_layer_done(int layer, KvCache& cache, ThreadPool& pool) {
  const int m = slot(layer);
  if (!prompt_evicts_ || m < 0) return;
  if (static_cast<int>(token_scores_.size()) != m) fail("internal: layers must be reported in order");
  const int P = S_ - p_.window;
  std::vector<std::vector<float>> tok(static_cast<size_t>(s_.n_kv_heads), std::vector<float>(static_cast<size_t>(P)));
  LayerWindowTerms terms;
  switch (parts_.selector) {
    case KvSelector::Recent:
      for (auto& t : tok)
        for (int j = 0; j < P; ++j) t[static_cast<size_t>(j)] = static_cast<float>(recency_score(j, P));
      break;
    case KvSelector::HeavyHitter:
    case KvSelector::AhaKv:
    case KvSelector::Sre:
    case KvSelector::WindowMax7:
    case KvSelector::Indicator: {
      // Token scores per candidate row (the rows below P), and the window statistics where the
      // selector or the allocator reads them.
      std::vector<std::vector<float>> by_row(static_cast<size_t>(s_.n_kv_heads));
      LayerStats st;
      if (uses_window()) {
        const bool snap = parts_.selector == KvSelector::WindowMax7;
        st = window_stats(q_window_.data(), S_, p_.observed(), P, cache, layer, s_, snap ? 0.0 : p_.gamma,
                          snap ? TokenPool::Max7 : TokenPool::Avg5, pool);
        terms.entropy = st.entropy;
        terms.variance = st.variance;
      }
      if (parts_.selector == KvSelector::Sre) {
        prefill_sre(m, layer, P, cache, pool, by_row);
      } else if (accumulating()) {
        std::vector<double> score;
        for (int g = 0; g < s_.n_kv_heads; ++g) {
          const int n_cand = rows_below(cache.head(layer, g), P);
          score.resize(static_cast<size_t>(n_cand));
          accumulated_scores(m, g, n_cand, score.data());
          by_row[static_cast<size_t>(g)].assign(score.begin(), score.end());
        }
      } else {
        by_row = std::move(st.indicator);
      }
      if (parts_.allocator == KvAllocator::Vabs || parts_.allocator == KvAllocator::VabsVariance) {
        const VabsTerms v = vabs_terms(q_window_.data(), S_, p_.observed(), P, cache, layer, s_, by_row, p_.budget - p_.window, pool);
        terms.vabs_tv_va = v.tv_va;
        terms.vabs_entropy = v.entropy;
      }
      // The scores are per row; the kept set is chosen per position (the same while the cache
      // holds every prompt token; a chunked prefill's cache holds what earlier chunks kept).
      for (int g = 0; g < s_.n_kv_heads; ++g) {
        const KvHead& kh = cache.head(layer, g);
        const std::vector<float>& sc = by_row[static_cast<size_t>(g)];
        for (size_t r = 0; r < sc.size(); ++r) tok[static_cast<size_t>(g)][static_cast<size_t>(kh.pos[r])] = sc[r];
      }
      break;
    }
    case KvSelector::None:
      break;
  }
  token_scores_.push_back(std::move(tok));
  if (!head_budgets_.empty()) {  // SRE-mass: the heads' own budgets; the layer's is their mean
    const std::vector<int64_t>& hb = head_budgets_.back();
    int64_t sum = 0;
    for (int64_t b : hb) sum += b;
    scores_.push_back(0.0);
    budgets_.push_back((sum + s_.n_kv_heads / 2) / s_.n_kv_heads);
    if (p_.cascade) evict_to(budgets_, cache);
    return;
  }
  scores_.push_back(layer_preference(p_, parts_.allocator, terms));
  std::vector<int64_t> held;  // a later chunk: each seen layer's candidates (its rows below P)
  if (continues_)
    for (size_t i = 0; i < scores_.size(); ++i) {
      int most = 0;
      for (int h = 0; h < s_.n_kv_heads; ++h) most = std::max(most, rows_below(cache.head(layers_[i], h), P));
      held.push_back(most);
    }
  budgets_ = cascade_budgets(p_, parts_.allocator, n_layers_, S_, scores_, budgets_, continues_ ? &held : nullptr);
  if (p_.cascade) evict_to(budgets_, cache);
}

void KvEvictor::finish(KvCache& cache) {
  if (prompt_evicts_ && !p_.cascade) evict_to(budgets_, cache);
}

void KvEvictor::evict_to(const std::vector<int64_t>& budgets, KvCache& cache) {
  const int P = S_ - p_.window;
  for (size_t m = 0; m < budgets.size(); ++m)
    for (int h = 0; h < s_.n_kv_heads; ++h) {
      const int l = layers_[m];
      const KvHead& kh = cache.head(l, h);
      const std::vector<float>& score = token_scores_[m][static_cast<size_t>(h)];
      std::vector<float> cand;  // scores of the held prefix tokens, in row order
      for (int r = 0; r < kh.n && kh.pos[static_cast<size_t>(r)] < P; ++r)
        cand.push_back(score[static_cast<size_t>(kh.pos[static_cast<size_t>(r)])]);
      const int n_cand = static_cast<int>(cand.size());
      const int64_t b = head_budget(static_cast<int>(m), h, budgets[m]);
      if (b >= n_cand) continue;
      std::vector<char> keep = top_k_flags(cand.data(), n_cand, b);
      keep.resize(static_cast<size_t>(kh.n), 1);  // the window and anything after it
      cache.note_compacted(remove_rows(l, h, keep, cache));
      cache.release_unused(l, h);  // so resident memory follows the cascading bound
    }
}

KvCompaction KvEvictor::remove_rows(int layer, int kvh, const std::vector<char>& keep, KvCache& cache) {
  const KvCompaction c = cache.compact_head(layer, kvh, keep, p_.absorbs(), p_.recall_pages > 0);
  if (accumulating()) sums_[static_cast<size_t>(slot(layer))][static_cast<size_t>(kvh)].keep_rows(keep);
  std::vector<float>& e = sre_[static_cast<size_t>(slot(layer))][static_cast<size_t>(kvh)];
  size_t w = 0;
  for (size_t r = 0; r < e.size(); ++r)
    if (keep[r]) e[w++] = e[r];
  e.resize(w);
  if (e.capacity() > 2 * e.size() + 64) e.shrink_to_fit();  // a prompt's scores, down to its budget's
  return c;
}

int64_t KvEvictor::decode_budget(int layer, int kvh) const {
  // Layers that saw no prefill eviction keep C - Sw prefix tokens (algorithm.md §2.1); under
  // SRE-mass each head keeps its own.
  const int m = slot(layer);
  return m >= 0 && m < static_cast<int>(budgets_.size()) ? head_budget(m, kvh, budgets_[static_cast<size_t>(m)]) : p_.budget - p_.window;
}

bool KvEvictor::scores_in_decode() const {
  return parts_.selector == KvSelector::Indicator || parts_.selector == KvSelector::WindowMax7 || accumulating();
}

void KvEvictor::score_decode_query(int layer, int kvh, const float* q, int32_t qpos, const KvHead& kh) {
  const int d = s_.head_dim, group = s_.n_heads / s_.n_kv_heads;
  DecodeRowScores& x = decode_x_[static_cast<size_t>(kvh)];
  x.compute(q + static_cast<size_t>(kvh * group) * d, group, qpos, kh, d, s_.softcap);
  // The accumulated sums take this query's softmax row before the victim is chosen from them.
  if (!accumulating()) return;
  const int m = slot(layer);
  track_rows(m, kvh, kh);
  thread_local std::vector<double> row;
  row.resize(static_cast<size_t>(x.n));
  decode_attention_row(x, step_gain(static_cast<int64_t>(qpos) + 1, gain_budget()), row.data());
  sums_[static_cast<size_t>(m)][static_cast<size_t>(kvh)].add(row.data(), x.n, qpos);
}

int KvEvictor::decode_victim(int layer, int kvh, int32_t qpos, const KvCache& cache, int n_cand) const {
  std::vector<double> score(static_cast<size_t>(n_cand), 0.0);
  decode_candidate_scores(layer, kvh, qpos, cache, n_cand, score.data());
  return static_cast<int>(std::min_element(score.begin(), score.end()) - score.begin());
}

void KvEvictor::decode_candidate_scores(int layer, int kvh, int32_t qpos, const KvCache& cache, int n_cand, double* score) const {
  const KvHead& kh = cache.head(layer, kvh);
  std::fill(score, score + n_cand, 0.0);
  switch (parts_.selector) {
    case KvSelector::Recent:
      for (int r = 0; r < n_cand; ++r) score[static_cast<size_t>(r)] = recency_score(kh.pos[static_cast<size_t>(r)], qpos + 1);
      break;
    case KvSelector::HeavyHitter:
    case KvSelector::AhaKv:
      accumulated_scores(slot(layer), kvh, n_cand, score);
      break;
    case KvSelector::Sre: {
      const std::vector<float>& e = sre_[static_cast<size_t>(slot(layer))][static_cast<size_t>(kvh)];
      if (static_cast<int>(e.size()) < n_cand) fail("internal: a candidate has no self-recall error");
      std::copy(e.begin(), e.begin() + n_cand, score);
      break;
    }
    default: {
      // algorithm.md §5.3: the current query's softmax over the whole exact cache (causal only),
      // pooled over the candidates in position order, averaged over the group.
      const TokenPool pool = parts_.selector == KvSelector::WindowMax7 ? TokenPool::Max7 : TokenPool::Avg5;
      decode_scores(decode_x_[static_cast<size_t>(kvh)], n_cand, pool, score);
    }
  }
}

void KvEvictor::on_decode_batched(int layer, const float* q, int32_t qpos, KvCache& cache, ThreadPool& pool) {
  // A head evicts only once it holds evict_every rows over budget + window, then all of them at
  // once: one scoring pass ranks the candidates and one compaction moves the rows.
  const bool scored = scores_in_decode();
  std::vector<std::vector<char>> keep(static_cast<size_t>(s_.n_kv_heads));
  pool.parallel_for(s_.n_kv_heads, 1, [&](int64_t lo, int64_t hi, int) {
    std::vector<double> score;
    for (int64_t g = lo; g < hi; ++g) {
      const KvHead& kh = cache.head(layer, static_cast<int>(g));
      if (scored) score_decode_query(layer, static_cast<int>(g), q, qpos, kh);
      const int64_t over = kh.n - (decode_budget(layer, static_cast<int>(g)) + p_.window);
      if (over < p_.evict_every) continue;
      const int n_cand = kh.n - p_.window;
      if (parts_.selector == KvSelector::Sre) update_sre(layer, static_cast<int>(g), kh, n_cand);
      score.resize(static_cast<size_t>(n_cand));
      decode_candidate_scores(layer, static_cast<int>(g), qpos, cache, n_cand, score.data());
      std::vector<char>& k = keep[static_cast<size_t>(g)];
      k = top_k_flags(score.data(), n_cand, n_cand - over);
      k.resize(static_cast<size_t>(kh.n), 1);  // the window
    }
  });
  for (int kvh = 0; kvh < s_.n_kv_heads; ++kvh) {
    const std::vector<char>& k = keep[static_cast<size_t>(kvh)];
    if (k.empty()) continue;
    cache.note_compacted(remove_rows(layer, kvh, k, cache));
    if (scored) decode_x_[static_cast<size_t>(kvh)].keep_rows(k);
  }
  if (scored) decode_x_layer_ = layer;
}

void KvEvictor::on_decode(int layer, const float* q, int32_t qpos, KvCache& cache, ThreadPool& pool) {
  decode_x_layer_ = -1;
  if (!evicts_in_decode() || slot(layer) < 0) return;
  const bool scored = scores_in_decode();
  if (scored) decode_x_.resize(static_cast<size_t>(s_.n_kv_heads));
  if (p_.evict_every > 1) return on_decode_batched(layer, q, qpos, cache, pool);
  // Each head over its budget gives up one row per round: a head scores its rows, picks its victim
  // and compacts, in parallel with the others (one dispatch), and the counts are noted after. The
  // query's scores are computed once, in the first round, and lose the evicted rows with the
  // cache. A head is one row over after a decode token's append, so one round is the rule;
  // another runs only while some head is still over.
  std::vector<KvCompaction> done(static_cast<size_t>(s_.n_kv_heads));
  for (bool first = true;; first = false) {
    pool.parallel_for(s_.n_kv_heads, 1, [&](int64_t lo, int64_t hi, int) {
      std::vector<char> keep;
      for (int64_t g = lo; g < hi; ++g) {
        const KvHead& kh = cache.head(layer, static_cast<int>(g));
        if (first && scored) score_decode_query(layer, static_cast<int>(g), q, qpos, kh);
        done[static_cast<size_t>(g)] = KvCompaction{};
        if (kh.n <= decode_budget(layer, static_cast<int>(g)) + p_.window) continue;
        if (parts_.selector == KvSelector::Sre) update_sre(layer, static_cast<int>(g), kh, kh.n - p_.window);
        const int v = decode_victim(layer, static_cast<int>(g), qpos, cache, kh.n - p_.window);
        keep.assign(static_cast<size_t>(kh.n), 1);
        keep[static_cast<size_t>(v)] = 0;
        done[static_cast<size_t>(g)] = remove_rows(layer, static_cast<int>(g), keep, cache);
        if (scored) decode_x_[static_cast<size_t>(g)].erase(v);
      }
    });
    bool over = false;
    for (int kvh = 0; kvh < s_.n_kv_heads; ++kvh) {
      if (done[static_cast<size_t>(kvh)].removed > 0) cache.note_compacted(done[static_cast<size_t>(kvh)]);
      over |= cache.head(layer, kvh).n > decode_budget(layer, kvh) + p_.window;
    }
    if (!over) break;
  }
  if (scored) decode_x_layer_ = layer;
}

size_t KvEvictor::selector_row_bytes(const KvPolicyParams& p) {
  if (!p.evicts()) return 0;
  if (uses_sre(p)) return sizeof(float);
  if (!accumulates(p)) return 0;
  size_t b = sizeof(double);  // the sums
  if (uses_aha(p) && p.aha.value) b += sizeof(float);
  if (uses_aha(p) && p.aha.recent) b += static_cast<size_t>(p.observed()) * sizeof(float);
  return b;
}

size_t KvEvictor::selector_state_bytes() const {
  size_t b = 0;
  for (const std::vector<AttentionSums>& layer : sums_)
    for (const AttentionSums& a : layer) b += a.bytes();
  for (const std::vector<std::vector<float>>& layer : sre_)
    for (const std::vector<float>& e : layer) b += e.size() * sizeof(float);
  return b;
}

const std::vector<DecodeRowScores>* KvEvictor::decode_row_scores(int layer) const {
  return layer == decode_x_layer_ ? &decode_x_ : nullptr;
}

}  // namespace slake
