// The flash attention kernel (attend_rows) and its lane exponential against float64: the exact
// part (m, l, unnormalised accumulator) per row for every row count up to kLanes, GQA groups,
// windows, rows that see nothing, and a cache whose tokens were evicted into the linear state
// (attention_prefill with PTAA against the Taylor formula token by token).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "reference_math.h"
#include "slake/error.h"
#include "slake/kv/attention.h"
#include "slake/kv/attention_rows.h"
#include "slake/cpu/lanes.h"
#include "test_util.h"

namespace slake {
namespace {

TEST(LanesExp, WithinTwoUlpOverTheFloatRange) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-87.0f, 88.0f);
  for (int it = 0; it < 20000; ++it) {
    lanes_f x;
    for (int i = 0; i < kLanes; ++i) x[i] = it == 0 ? -87.0f + 11.0f * i : u(rng);
    const lanes_f y = lanes_exp(x);
    for (int i = 0; i < kLanes; ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      const double ulp = std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want);
      ASSERT_LE(std::abs(y[i] - want), 2.0 * ulp) << "x = " << x[i];
    }
  }
}

TEST(LanesExp, LimitsAndZero) {
  lanes_f x = splat(0.0f);
  x[1] = -std::numeric_limits<float>::infinity();
  x[2] = -100.0f;
  x[3] = 100.0f;
  const lanes_f y = lanes_exp(x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_TRUE(std::isinf(y[3]));
}

// The part-wise comparisons, select and maximum of lanes.h against the scalar expression, lane by
// lane, with -inf, +inf, NaN and equal values among the inputs.
TEST(LanesCompare, EveryLaneMatchesTheScalarExpression) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> pick(0, 6);
  const float specials[] = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 1.5f};
  std::normal_distribution<float> g;
  for (int it = 0; it < 2000; ++it) {
    lanes_f a, b;
    lanes_i ia, ib;
    for (int i = 0; i < kLanes; ++i) {
      const int ka = pick(rng), kb = pick(rng);
      a[i] = ka < 6 ? specials[ka] : g(rng);
      b[i] = kb < 6 ? specials[kb] : (it % 3 == 0 ? a[i] : g(rng));
      ia[i] = static_cast<int32_t>(rng() % 7) - 3;
      ib[i] = static_cast<int32_t>(rng() % 7) - 3;
    }
    const lanes_i gt = lanes_gt(a, b), lt = lanes_lt(a, b), eq = lanes_eq(a, b), gti = lanes_gt_i(ia, ib), lei = lanes_le_i(ia, ib);
    const lanes_f sel = lanes_select(gt, a, b), mx = lanes_max(a, b);
    for (int i = 0; i < kLanes; ++i) {
      ASSERT_EQ(gt[i], a[i] > b[i] ? -1 : 0) << a[i] << " " << b[i];
      ASSERT_EQ(lt[i], a[i] < b[i] ? -1 : 0) << a[i] << " " << b[i];
      ASSERT_EQ(eq[i], a[i] == b[i] ? -1 : 0) << a[i] << " " << b[i];
      ASSERT_EQ(gti[i], ia[i] > ib[i] ? -1 : 0) << ia[i] << " " << ib[i];
      ASSERT_EQ(lei[i], ia[i] <= ib[i] ? -1 : 0) << ia[i] << " " << ib[i];
      const float want = a[i] > b[i] ? a[i] : b[i];  // the second operand on NaN and on ties
      ASSERT_EQ(std::memcmp(&sel[i], &want, sizeof want), 0) << a[i] << " " << b[i];
      ASSERT_EQ(std::memcmp(&mx[i], &want, sizeof want), 0) << a[i] << " " << b[i];
    }
  }
}

struct RowsCase {
  int n_rows, head_dim, n_keys, window;
  float softcap = 0.0f;  // Gemma 2's logit soft-cap (0: none)
};

// The float64 logit of q and k: q . k / sqrt(d), soft-capped when cap > 0.
double logit64(const float* q, const float* k, int d, double cap) {
  const double x = test::dot64(q, k, d) / std::sqrt(static_cast<double>(d));
  return cap > 0 ? cap * std::tanh(x / cap) : x;
}

// lanes_soft_cap against cap * tanh(x / cap) in float64, over the range and at the limits.
TEST(LanesSoftCap, MatchesTanh) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  for (float cap : {0.5f, 4.0f, 50.0f})
    for (int it = 0; it < 2000; ++it) {
      lanes_f x;
      for (int i = 0; i < kLanes; ++i) x[i] = it == 0 ? (i - 8) * 0.01f * cap : u(rng) * cap / 50.0f;
      if (it == 1) x[0] = std::numeric_limits<float>::infinity(), x[1] = -std::numeric_limits<float>::infinity();
      const lanes_f y = lanes_soft_cap(x, cap);
      for (int i = 0; i < kLanes; ++i)
        ASSERT_NEAR(y[i], cap * std::tanh(static_cast<double>(x[i]) / cap), 5e-7 * cap) << "x = " << x[i] << " cap " << cap;
    }
}

class AttendRows : public ::testing::TestWithParam<RowsCase> {};

// Every row's m, l and accumulator against float64 sums over its visible keys.
TEST_P(AttendRows, ExactPartMatchesFloat64) {
  const RowsCase c = GetParam();
  const int d = c.head_dim;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  KvCache cache(1, 1, d, c.n_keys);
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
  for (int j = 0; j < c.n_keys; ++j) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    cache.append(0, k.data(), v.data(), 2 * j);  // positions with gaps, as after eviction
  }
  const KvHead& kh = cache.head(0, 0);
  std::vector<std::vector<float>> q(static_cast<size_t>(c.n_rows), std::vector<float>(static_cast<size_t>(d)));
  std::vector<const float*> qr;
  std::vector<int32_t> qpos;
  for (int r = 0; r < c.n_rows; ++r) {
    for (auto& x : q[static_cast<size_t>(r)]) x = nd(rng);
    qr.push_back(q[static_cast<size_t>(r)].data());
    // Rows spread over the cache; row 0 sits before every key (position -1 sees nothing).
    qpos.push_back(r == 0 && c.n_rows > 2 ? -1 : (2 * c.n_keys * (r + 1)) / c.n_rows - 1);
  }
  std::vector<float> acc(static_cast<size_t>(c.n_rows) * d), m(static_cast<size_t>(c.n_rows)), l(m.size());
  attend_rows(qr.data(), qpos.data(), c.n_rows, kh, d, c.window, c.softcap, acc.data(), m.data(), l.data());

  for (int r = 0; r < c.n_rows; ++r) {
    double mx = -INFINITY;
    for (int j = 0; j < kh.n; ++j)
      if (test::visible(kh.pos[static_cast<size_t>(j)], qpos[static_cast<size_t>(r)], c.window))
        mx = std::max(mx, logit64(qr[static_cast<size_t>(r)], kh.key(j, d), d, c.softcap));
    if (mx == -INFINITY) {
      EXPECT_EQ(m[static_cast<size_t>(r)], -std::numeric_limits<float>::infinity()) << "row " << r;
      EXPECT_EQ(l[static_cast<size_t>(r)], 0.0f) << "row " << r;
      for (int i = 0; i < d; ++i) ASSERT_EQ(acc[static_cast<size_t>(r * d + i)], 0.0f);
      continue;
    }
    double sum = 0;
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    for (int j = 0; j < kh.n; ++j) {
      if (!test::visible(kh.pos[static_cast<size_t>(j)], qpos[static_cast<size_t>(r)], c.window)) continue;
      const double w = std::exp(logit64(qr[static_cast<size_t>(r)], kh.key(j, d), d, c.softcap) - mx);
      sum += w;
      for (int i = 0; i < d; ++i) want[static_cast<size_t>(i)] += w * kh.value(j, d)[i];
    }
    ASSERT_NEAR(m[static_cast<size_t>(r)], mx, 1e-5 * (1 + std::abs(mx))) << "row " << r;
    ASSERT_NEAR(l[static_cast<size_t>(r)], sum, 2e-5 * sum) << "row " << r;
    for (int i = 0; i < d; ++i)
      ASSERT_NEAR(acc[static_cast<size_t>(r * d + i)], want[static_cast<size_t>(i)], 2e-5 * (sum + std::abs(want[static_cast<size_t>(i)])))
          << "row " << r << " dim " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttendRows,
                         ::testing::Values(RowsCase{1, 64, 1, 0}, RowsCase{1, 8, 40, 0}, RowsCase{5, 12, 17, 0},
                                           RowsCase{8, 64, 100, 0}, RowsCase{16, 64, 300, 0}, RowsCase{16, 128, 64, 0},
                                           RowsCase{16, 64, 300, 50}, RowsCase{7, 20, 33, 9}, RowsCase{3, 8, 1, 3},
                                           // at most 4 rows and a head dimension of 16s: the few-rows kernel
                                           RowsCase{1, 64, 300, 0}, RowsCase{3, 64, 300, 0}, RowsCase{3, 64, 300, 50},
                                           RowsCase{4, 128, 100, 0}, RowsCase{2, 80, 33, 9}, RowsCase{3, 64, 1, 0},
                                           RowsCase{4, 64, 17, 5}, RowsCase{4, 256, 300, 0}, RowsCase{4, 256, 600, 512},
                                           // soft-capped logits, both kernels
                                           RowsCase{16, 64, 300, 50, 2.0f}, RowsCase{7, 20, 33, 9, 1.0f},
                                           RowsCase{3, 64, 300, 0, 2.0f}, RowsCase{4, 64, 17, 5, 0.5f}),
                         [](const ::testing::TestParamInfo<RowsCase>& i) {
                           const RowsCase& c = i.param;
                           return "rows" + std::to_string(c.n_rows) + "_d" + std::to_string(c.head_dim) + "_keys" +
                                  std::to_string(c.n_keys) + "_win" + std::to_string(c.window) +
                                  (c.softcap > 0 ? "_cap" + std::to_string(static_cast<int>(c.softcap * 10)) : "");
                         });

// Decode scores once, then attends with them (algorithm.md §5.2): the scores against float64 (and
// -inf for keys after a row and in lanes without a row), and attending with them equal to
// attending from the keys, for the lane kernel and the few-rows one.
TEST(AttendRows, ScoresAndScoredAttentionMatchFloat64) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (float cap : {0.0f, 2.0f})
  for (int n : {1, 3, 4, 6}) {
    const int d = 64, n_keys = 70;
    KvCache cache(1, 1, d, n_keys);
    std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
    for (int j = 0; j < n_keys; ++j) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      cache.append(0, k.data(), v.data(), j);
    }
    const KvHead& kh = cache.head(0, 0);
    std::vector<std::vector<float>> q(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(d)));
    const float* qr[kLanes];
    int32_t qpos[kLanes];
    for (int r = 0; r < n; ++r) {
      for (auto& x : q[static_cast<size_t>(r)]) x = nd(rng);
      qr[r] = q[static_cast<size_t>(r)].data();
      qpos[r] = n_keys - 1 - 9 * r;
    }
    RowBlock block;
    block.begin(qr, qpos, n, d, cap);
    std::vector<lanes_f> x(static_cast<size_t>(n_keys));
    block.scores(kh, n_keys, x.data());
    for (int j = 0; j < n_keys; ++j)
      for (int r = 0; r < kLanes; ++r) {
        const float got = x[static_cast<size_t>(j)][r];
        if (r >= n || j > qpos[r]) {
          ASSERT_EQ(got, -std::numeric_limits<float>::infinity()) << "rows " << n << " key " << j << " lane " << r;
          continue;
        }
        const double want = logit64(qr[r], kh.key(j, d), d, cap);
        ASSERT_NEAR(got, want, 1e-5 * (1 + std::abs(want))) << "rows " << n << " key " << j << " lane " << r;
      }
    std::vector<float> acc_a(static_cast<size_t>(n) * d), m_a(static_cast<size_t>(n)), l_a(m_a.size());
    std::vector<float> acc_b(acc_a.size()), m_b(m_a.size()), l_b(m_a.size());
    const auto range = block.key_range(kh, 0);
    block.attend_scored(kh, x.data(), 0, range.first, range.second);
    block.finish(acc_a.data(), m_a.data(), l_a.data());
    block.begin(qr, qpos, n, d, cap);
    block.attend(kh, 0, range.first, range.second);
    block.finish(acc_b.data(), m_b.data(), l_b.data());
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(m_a[static_cast<size_t>(r)], m_b[static_cast<size_t>(r)]) << "rows " << n;  // the same scores
      ASSERT_EQ(l_a[static_cast<size_t>(r)], l_b[static_cast<size_t>(r)]) << "rows " << n;
    }
    ASSERT_EQ(acc_a, acc_b) << "rows " << n;
  }
}

// Rows read in place from pages (RowBlock::attend_paged, a recall store's chosen pages): pages of
// 16 and 32 rows, and of 12 (tiles across pages, gathered row by row), some skipped, the short last page last, positions out of order within a page,
// some after a query and some outside a window, rows stored as f32, f16 and q8_0, blocks
// of the few-rows kernel (3 rows) and of the lanes kernel (9); against float64 softmax over the
// same stored rows.
TEST(AttendRows, PagedRowsMatchFloat64) {
  const int d = 64;
  std::mt19937 rng(17);
  for (const KvType t : {KvType::F32, KvType::F16, KvType::Q8_0})
    for (const int page : {16, 32, 12})
      for (const int n : {3, 9})
        for (const int window : {0, 300}) {
          const int n_rows = 5 * page + 7;
          const size_t rb = kv_row_bytes(t, d);
          std::vector<uint8_t> k(static_cast<size_t>(n_rows) * rb), v(k.size());
          std::vector<float> kf(static_cast<size_t>(n_rows) * d), vf(kf.size());
          std::vector<int32_t> pos(static_cast<size_t>(n_rows));
          std::uniform_real_distribution<float> u(-1.0f, 1.0f);
          for (int j = 0; j < n_rows; ++j) {
            std::vector<float> kr(d), vr(d);
            for (int i = 0; i < d; ++i) kr[static_cast<size_t>(i)] = 2.0f * u(rng), vr[static_cast<size_t>(i)] = u(rng);
            kv_store_row(t, kr.data(), k.data() + static_cast<size_t>(j) * rb, d);
            kv_store_row(t, vr.data(), v.data() + static_cast<size_t>(j) * rb, d);
            kv_load_rows(t, k.data() + static_cast<size_t>(j) * rb, kf.data() + static_cast<size_t>(j) * d, 1, d);
            kv_load_rows(t, v.data() + static_cast<size_t>(j) * rb, vf.data() + static_cast<size_t>(j) * d, 1, d);
            pos[static_cast<size_t>(j)] = static_cast<int32_t>(rng() % 1000);  // any order
          }
          const std::vector<int> pages{0, 2, 3, 5};  // page 5 is the short one (7 rows)
          std::vector<std::vector<float>> q(static_cast<size_t>(n), std::vector<float>(d));
          std::vector<const float*> qp;
          std::vector<int32_t> qpos;
          for (int r = 0; r < n; ++r) {
            for (float& x : q[static_cast<size_t>(r)]) x = u(rng);
            qp.push_back(q[static_cast<size_t>(r)].data());
            qpos.push_back(800 + 40 * r);  // the rows see most keys, not all
          }
          RowBlock block;
          block.begin(qp.data(), qpos.data(), n, d, 0.0f);
          const PagedRows pr{t, k.data(), v.data(), rb, pos.data(), n_rows, page, pages.data(), static_cast<int>(pages.size())};
          block.attend_paged(pr, window);
          std::vector<float> acc(static_cast<size_t>(n) * d), m(static_cast<size_t>(n)), l(static_cast<size_t>(n));
          block.finish(acc.data(), m.data(), l.data());
          // Pages out of order, repeated, past the store, or a short page before the last: refused.
          for (const std::vector<int>& bad : {std::vector<int>{2, 0}, std::vector<int>{2, 2}, std::vector<int>{6}, std::vector<int>{5, 6}}) {
            RowBlock b2;
            b2.begin(qp.data(), qpos.data(), n, d, 0.0f);
            const PagedRows br{t, k.data(), v.data(), rb, pos.data(), n_rows, page, bad.data(), static_cast<int>(bad.size())};
            EXPECT_THROW(b2.attend_paged(br, window), Error);
          }
          for (int r = 0; r < n; ++r) {
            std::vector<std::pair<double, int>> seen;  // (logit, row)
            for (const int p : pages)
              for (int j = p * page; j < std::min(n_rows, (p + 1) * page); ++j) {
                const int32_t kp = pos[static_cast<size_t>(j)];
                if (kp > qpos[static_cast<size_t>(r)] || (window > 0 && kp <= qpos[static_cast<size_t>(r)] - window)) continue;
                double x = 0.0;
                for (int i = 0; i < d; ++i) x += static_cast<double>(q[static_cast<size_t>(r)][static_cast<size_t>(i)]) * kf[static_cast<size_t>(j) * d + i];
                seen.emplace_back(x / std::sqrt(static_cast<double>(d)), j);
              }
            ASSERT_FALSE(seen.empty());
            double mx = -INFINITY, den = 0.0;
            for (const auto& e : seen) mx = std::max(mx, e.first);
            std::vector<double> num(static_cast<size_t>(d), 0.0);
            for (const auto& [x, j] : seen) {
              const double w = std::exp(x - mx);
              den += w;
              for (int i = 0; i < d; ++i) num[static_cast<size_t>(i)] += w * vf[static_cast<size_t>(j) * d + i];
            }
            const std::string what = std::string(kv_type_name(t)) + " page " + std::to_string(page) + " rows " + std::to_string(n) +
                                     " window " + std::to_string(window) + " row " + std::to_string(r);
            EXPECT_NEAR(m[static_cast<size_t>(r)], mx, 1e-5) << what;
            EXPECT_NEAR(l[static_cast<size_t>(r)] * std::exp(m[static_cast<size_t>(r)] - mx), den, 1e-4 * den) << what;
            for (int i = 0; i < d; ++i)
              EXPECT_NEAR(acc[static_cast<size_t>(r) * d + i] / l[static_cast<size_t>(r)], num[static_cast<size_t>(i)] / den, 1e-5) << what << " dim " << i;
          }
        }
}

TEST(AttendRows, RefusesBlocksWiderThanTheLanes) {
  KvCache cache(1, 1, 8, 4);
  float q[8] = {};
  const float* qr[kLanes + 1];
  int32_t pos[kLanes + 1] = {};
  for (auto& p : qr) p = q;
  float acc[(kLanes + 1) * 8], m[kLanes + 1], l[kLanes + 1];
  EXPECT_THROW(attend_rows(qr, pos, kLanes + 1, cache.head(0, 0), 8, 0, 0.0f, acc, m, l), Error);
  EXPECT_THROW(attend_rows(qr, pos, 0, cache.head(0, 0), 8, 0, 0.0f, acc, m, l), Error);
}

// A prompt of many tokens (row blocks span several tokens and both KV heads) over a cache that
// evicted half its tokens into the linear state: each query head against the Taylor formula.
TEST(AttentionPrefill, WithEvictedTokensMatchesTheTaylorFormula) {
  const int n_heads = 8, n_kv = 2, d = 16, n_keys = 120, n_q = 21;
  const int group = n_heads / n_kv, qd = n_heads * d;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.7f);
  KvCache cache(1, n_kv, d, n_keys);
  std::vector<float> k(static_cast<size_t>(n_kv * d)), v(k.size());
  std::vector<std::vector<std::vector<float>>> ke(n_kv), ve(n_kv);  // evicted rows per KV head
  for (int j = 0; j < n_keys; ++j) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    cache.append(0, k.data(), v.data(), j);
  }
  for (int g = 0; g < n_kv; ++g) {
    std::vector<char> keep(static_cast<size_t>(n_keys), 1);
    for (int j = g; j < n_keys; j += 2) {
      if (j >= n_keys - 30) break;  // the most recent keys stay
      keep[static_cast<size_t>(j)] = 0;
      const KvHead& kh = cache.head(0, g);
      ke[static_cast<size_t>(g)].emplace_back(kh.key(j, d), kh.key(j, d) + d);
      ve[static_cast<size_t>(g)].emplace_back(kh.value(j, d), kh.value(j, d) + d);
    }
    cache.compact(0, g, keep, true);
  }
  std::vector<float> q(static_cast<size_t>(n_q * qd)), out(q.size());
  std::vector<int32_t> qpos(static_cast<size_t>(n_q));
  for (auto& x : q) x = nd(rng);
  for (int t = 0; t < n_q; ++t) qpos[static_cast<size_t>(t)] = n_keys - n_q + t;
  ThreadPool pool(2);
  attention_prefill(out.data(), q.data(), qpos.data(), n_q, cache, 0, {n_heads, n_kv, d, 0}, pool);
  for (int t = 0; t < n_q; ++t)
    for (int h = 0; h < n_heads; ++h) {
      const size_t off = static_cast<size_t>(t * qd + h * d);
      const int g = h / group;
      const std::vector<double> want = test::taylor_attention(q.data() + off, qpos[static_cast<size_t>(t)], cache.head(0, g),
                                                              ke[static_cast<size_t>(g)], ve[static_cast<size_t>(g)], d);
      for (int i = 0; i < d; ++i)
        ASSERT_NEAR(out[off + static_cast<size_t>(i)], want[static_cast<size_t>(i)], 1e-4 * (1 + std::abs(want[static_cast<size_t>(i)])))
            << "token " << t << " head " << h << " dim " << i;
    }
}

}  // namespace
}  // namespace slake
