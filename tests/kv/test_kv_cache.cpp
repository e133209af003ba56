// KvCache::compact against a row-by-row filter of the same rows: the kept rows stay in order with
// their positions, the dropped ones go into the linear state in row order (or nowhere), and the
// cache's counts follow. The keep patterns cover the shapes eviction produces: one row (a decode
// step), runs at either end, alternating rows, none and all.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "slake/kv/kv_cache.h"

namespace slake {
namespace {

using Flags = std::vector<char>;

std::vector<Flags> keep_patterns(int n) {
  std::vector<Flags> out;
  for (int victim : {0, n / 2, n - 1}) {  // one row, as a decode step evicts
    Flags f(static_cast<size_t>(n), 1);
    f[static_cast<size_t>(victim)] = 0;
    out.push_back(f);
  }
  Flags head(static_cast<size_t>(n), 1), tail(static_cast<size_t>(n), 1), alt(static_cast<size_t>(n));
  for (int r = 0; r < n / 3; ++r) head[static_cast<size_t>(r)] = tail[static_cast<size_t>(n - 1 - r)] = 0;
  for (int r = 0; r < n; ++r) alt[static_cast<size_t>(r)] = static_cast<char>(r % 2);
  out.push_back(head);
  out.push_back(tail);
  out.push_back(alt);
  out.push_back(Flags(static_cast<size_t>(n), 0));
  out.push_back(Flags(static_cast<size_t>(n), 1));
  std::mt19937 rng(11);
  Flags rnd(static_cast<size_t>(n));
  for (auto& x : rnd) x = static_cast<char>(rng() % 4 != 0);
  out.push_back(rnd);
  return out;
}

TEST(KvCache, CompactKeepsFlaggedRowsInOrderAndAbsorbsTheOthers) {
  const int n_kv = 2, d = 8, n = 37;
  for (bool absorb : {true, false})
    for (const Flags& keep : keep_patterns(n)) {
      KvCache cache(1, n_kv, d, n);
      std::mt19937 rng(5);
      std::normal_distribution<float> nd;
      std::vector<float> k(static_cast<size_t>(n_kv * d)), v(k.size());
      std::vector<std::vector<float>> rows_k, rows_v;  // head 0's rows as appended
      for (int j = 0; j < n; ++j) {
        for (auto& x : k) x = nd(rng);
        for (auto& x : v) x = nd(rng);
        cache.append(0, k.data(), v.data(), 3 * j + 1);
        rows_k.emplace_back(k.begin(), k.begin() + d);
        rows_v.emplace_back(v.begin(), v.begin() + d);
      }
      cache.compact(0, 0, keep, absorb);

      LinearState want_lin(d);
      std::vector<int> want_rows;
      for (int r = 0; r < n; ++r) {
        if (keep[static_cast<size_t>(r)])
          want_rows.push_back(r);
        else if (absorb)
          want_lin.absorb(rows_k[static_cast<size_t>(r)].data(), rows_v[static_cast<size_t>(r)].data());
      }
      const KvHead& kh = cache.head(0, 0);
      ASSERT_EQ(kh.n, static_cast<int>(want_rows.size()));
      ASSERT_EQ(kh.k.size(), want_rows.size() * d * sizeof(float));
      ASSERT_EQ(kh.pos.size(), want_rows.size());
      for (size_t i = 0; i < want_rows.size(); ++i) {
        const size_t r = static_cast<size_t>(want_rows[i]);
        EXPECT_EQ(kh.pos[i], 3 * static_cast<int>(r) + 1);
        for (int c = 0; c < d; ++c) {
          ASSERT_EQ(kh.key(static_cast<int>(i), d)[c], rows_k[r][static_cast<size_t>(c)]) << "row " << i;
          ASSERT_EQ(kh.value(static_cast<int>(i), d)[c], rows_v[r][static_cast<size_t>(c)]) << "row " << i;
        }
      }
      // The same absorptions in the same order: the same floats.
      EXPECT_EQ(kh.lin.n, want_lin.n);
      EXPECT_EQ(kh.lin.M, want_lin.M);
      EXPECT_EQ(kh.lin.ksum, want_lin.ksum);
      EXPECT_EQ(kh.lin.vsum, want_lin.vsum);
      // Head 1 is untouched, and the count of held tokens follows.
      EXPECT_EQ(cache.head(0, 1).n, n);
      EXPECT_EQ(cache.tokens_held(), static_cast<int64_t>(n + want_rows.size()));
      const size_t row_bytes = 2 * sizeof(float) * d + sizeof(int32_t);
      EXPECT_EQ(cache.bytes_used(), (n + want_rows.size()) * row_bytes + (want_lin.n > 0 ? want_lin.bytes() : 0));
    }
}

}  // namespace
}  // namespace slake
