// The recall store's kernels (recall.cuh, and ptaa_decode with a RecallView):
// - page scores against float64 dot products over the stored keys as read back (a q8_0 store's
//   against the query rounded to q8_0, as the CPU scores them);
// - the page choice against the CPU's RecallStore::select_scored on the same scores, ties included;
// - held choices against RecallStore::holds_choice and held_choice;
// - decode attention over the exact cache plus the chosen pages against float64 attention over
//   the same rows, and with every page of a lossless store recalled, against the CPU's attention
//   over the whole cache.
// Every row type the device stores; GQA groups; heads whose stores are empty, short or ragged.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernel_test_util.h"
#include "kv_device.h"
#include "slake/kv/attention_rows.h"
#include "slake/kv/kv_recall.h"
#include "slake/model/softcap.h"
#include "slake/quant/dtype.h"

namespace slake::gpu::test {
namespace {

constexpr int kPage = 16;

// Each KV head's store rows (n[g] of them, positions 2j + 1) as a one-layer KvCache of the
// store's type, the layout the kernels read (DeviceKvLayer), and as the CPU's RecallStore.
struct Stores {
  KvCache rows;
  std::vector<RecallStore> cpu;
  Stores(int H, int d, KvType type, const std::vector<int>& n, uint32_t seed, float key_scale = 1.0f)
      : rows(1, H, d, std::max(1, *std::max_element(n.begin(), n.end())), 0, type, type) {
    for (int g = 0; g < H; ++g) {
      const int m = n[static_cast<size_t>(g)];
      const std::vector<float> k = random_floats(static_cast<size_t>(m) * d, seed + 7 * g, -key_scale, key_scale);
      const std::vector<float> v = random_floats(static_cast<size_t>(m) * d, seed + 7 * g + 1);
      KvHead& kh = rows.head(0, g);
      set_rows(kh, k, v, d);
      kh.pos.resize(static_cast<size_t>(m));
      for (int j = 0; j < m; ++j) kh.pos[static_cast<size_t>(j)] = 2 * j + 1;
      kh.n = m;
      cpu.emplace_back(d, kPage, type);
      for (int j = 0; j < m; ++j) cpu.back().add(k.data() + static_cast<size_t>(j) * d, v.data() + static_cast<size_t>(j) * d, 2 * j + 1);
    }
  }
};

int store_capacity(const std::vector<int>& n) { return std::max(1, *std::max_element(n.begin(), n.end())); }
int score_pages(const std::vector<int>& n) { return (store_capacity(n) + kPage - 1) / kPage; }

// Each row of d floats of q divided by its length, in float64.
std::vector<double> unit_rows(const std::vector<float>& q, int d) {
  std::vector<double> u(q.begin(), q.end());
  for (size_t r = 0; r < u.size() / d; ++r) {
    double nn = 0;
    for (int i = 0; i < d; ++i) nn += u[r * d + i] * u[r * d + i];
    for (int i = 0; i < d; ++i) u[r * d + i] /= std::sqrt(nn);
  }
  return u;
}

std::vector<double> row_of(const KvHead& kh, bool keys, int j, int d) {
  std::vector<float> f(static_cast<size_t>(d));
  if (keys) kh.load_keys(j, 1, d, f.data());
  else kh.load_values(j, 1, d, f.data());
  return {f.begin(), f.end()};
}

TEST(KernelRecall, PageScoresAreTheLargestKeyDotProductOfEachPage) {
  for (const KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    // 2 KV heads of a group of 3 (9 pages and a ragged one; one page and a bit); then a group of
    // 10 query rows (two passes of the kernel's 8), a head with an empty store.
    for (const auto& [d, n_heads, n] : {std::tuple<int, int, std::vector<int>>{64, 6, {150, 20}},
                                        std::tuple<int, int, std::vector<int>>{32, 20, {0, 47}}}) {
      const int H = static_cast<int>(n.size()), group = n_heads / H, np_all = score_pages(n);
      Stores st(H, d, t, n, 5);
      DeviceKvLayer dev(st.rows, 0, store_capacity(n));
      const std::vector<float> q = random_floats(static_cast<size_t>(n_heads) * d, 77, -1.5f, 1.5f);
      // The query a q8_0 store's keys meet: rounded to q8_0 blocks (scale max |x| / 127 as f16,
      // values round(x / scale) to even), as the CPU's quantize_q8_0 rounds it.
      std::vector<double> qr(q.begin(), q.end());
      if (t == KvType::Q8_0)
        for (size_t b = 0; b < q.size() / 32; ++b) {
          float amax = 0.0f;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(q[b * 32 + i]));
          const float sc = amax / 127.0f, inv = sc != 0.0f ? 1.0f / sc : 0.0f;
          for (int i = 0; i < 32; ++i)
            qr[b * 32 + i] = static_cast<double>(fp16_to_fp32(fp32_to_fp16(sc))) * std::nearbyint(q[b * 32 + i] * inv);
        }
      DeviceBuffer<float> dq(q), score(static_cast<size_t>(n_heads) * (np_all + 3));
      recall_page_scores(score.get(), np_all + 3, dq.get(), n_heads, dev.view(), kPage);
      const std::vector<float> got = score.download();
      for (int h = 0; h < n_heads; ++h) {
        const KvHead& kh = st.rows.head(0, h / group);
        for (int p = 0; p < np_all; ++p) {
          double want = -INFINITY;
          for (int j = p * kPage; j < std::min(kh.n, (p + 1) * kPage); ++j) {
            const std::vector<double> k = row_of(kh, true, j, d);
            double dot = 0.0;
            for (int i = 0; i < d; ++i) dot += qr[static_cast<size_t>(h) * d + i] * k[static_cast<size_t>(i)];
            want = std::max(want, dot);
          }
          const double g = got[static_cast<size_t>(h) * (np_all + 3) + p];
          if (std::isinf(want)) EXPECT_TRUE(std::isinf(g) && g < 0) << "page past the store's end";
          else EXPECT_NEAR(g, want, 1e-5 + 1e-5 * std::abs(want)) << kv_type_name(t) << " head " << h << " page " << p;
        }
      }
    }
  }
}

// recall_select on given scores against RecallStore::select_scored on the same ones, per KV head:
// head g's rows are score rows first_row + g * head_rows + r (head_rows 0: the group, adjacent).
void expect_select_as_cpu(const std::vector<float>& score, int64_t ld, int n_heads, const Stores& st, const std::vector<int>& n,
                          int want, const std::string& what, int64_t first_row = 0, int64_t head_rows = 0) {
  const int H = static_cast<int>(n.size()), group = n_heads / H, np_all = score_pages(n);
  DeviceKvLayer dev(st.rows, 0, store_capacity(n));
  DeviceBuffer<float> ds(score);
  DeviceBuffer<uint8_t> scratch(recall_select_scratch_bytes(H, ld));
  const int64_t pages_ld = std::max(1, std::min(want, np_all));
  DeviceBuffer<int32_t> pages(static_cast<size_t>(H * pages_ld)), n_chosen(static_cast<size_t>(H));
  recall_select(pages.get(), pages_ld, n_chosen.get(), ds.get() + first_row * ld, ld, n_heads, dev.view(), kPage, want, scratch.get(),
                -1, head_rows);
  const int64_t stride = head_rows > 0 ? head_rows : group;
  const std::vector<int32_t> got = pages.download(), got_n = n_chosen.download();
  for (int g = 0; g < H; ++g) {
    const RecallStore& rs = st.cpu[static_cast<size_t>(g)];
    const int np = rs.n_pages();
    std::vector<float> s(static_cast<size_t>(group) * np);  // [row][page], the CPU's layout
    std::vector<const float*> qrows(static_cast<size_t>(group), nullptr);
    for (int r = 0; r < group; ++r)
      for (int p = 0; p < np; ++p) s[static_cast<size_t>(r) * np + p] = score[static_cast<size_t>((first_row + g * stride + r) * ld + p)];
    std::vector<int> want_pages;
    rs.select_scored(qrows.data(), s.data(), group, want, &want_pages);
    ASSERT_EQ(got_n[static_cast<size_t>(g)], static_cast<int>(want_pages.size())) << what << " head " << g;
    for (size_t i = 0; i < want_pages.size(); ++i)
      EXPECT_EQ(got[static_cast<size_t>(g) * pages_ld + i], want_pages[i]) << what << " head " << g << " entry " << i;
  }
}

// Held choices (recall_hold_check, then the scores and choice skipping the heads that hold, then
// recall_hold_update) against the CPU's RecallStore::holds_choice, held_choice and select_scored:
// three KV heads whose pages {1, 4, 6} were chosen when their stores held 100 rows (7 pages) and
// that now hold 150 (10). Head 0's rows turned little since (cosine about 0.99), one of head 1's
// turned away, and head 2's choice has served `every` steps: head 0 attends pages 1 and 4 and every
// page from 6 on, the others choose again and keep that choice and their rows' directions.
TEST(KernelRecall, HeldChoicesFollowTheCpusRule) {
  const int d = 64, H = 3, group = 3, n_heads = H * group, every = 4, want = 3, n0 = 100, n1 = 150;
  const std::vector<int> n(static_cast<size_t>(H), n1);
  Stores st(H, d, KvType::F32, n, 9);
  const std::vector<float> q0 = random_floats(static_cast<size_t>(n_heads) * d, 31);
  std::vector<float> q1 = q0;
  const std::vector<float> noise = random_floats(q1.size(), 32, -0.1f, 0.1f), away = random_floats(static_cast<size_t>(d), 33);
  for (size_t i = 0; i < q1.size(); ++i) q1[i] += noise[i];
  std::copy(away.begin(), away.end(), q1.begin() + static_cast<std::ptrdiff_t>(1 * group + 1) * d);  // head 1, row 1
  const auto rows_of = [&](const std::vector<float>& q, int g) {
    std::vector<const float*> r;
    for (int i = 0; i < group; ++i) r.push_back(q.data() + static_cast<size_t>(g * group + i) * d);
    return r;
  };
  // The CPU: each head's first n0 rows, the choice held for q0, the rest of the rows added, head
  // 2's choice used up.
  const std::vector<int> chosen = {1, 4, 6};
  std::vector<RecallStore> cpu;
  cpu.reserve(static_cast<size_t>(H));  // a moved store holds no choice
  for (int g = 0; g < H; ++g) {
    const KvHead& kh = st.rows.head(0, g);
    cpu.emplace_back(d, kPage, KvType::F32);
    for (int j = 0; j < n1; ++j) {
      if (j == n0) cpu.back().hold_choice(chosen, rows_of(q0, g).data(), group);
      const std::vector<double> k = row_of(kh, true, j, d), v = row_of(kh, false, j, d);
      const std::vector<float> kf(k.begin(), k.end()), vf(v.begin(), v.end());
      cpu.back().add(kf.data(), vf.data(), kh.pos[static_cast<size_t>(j)]);
    }
  }
  for (int u = 1; u < every; ++u) cpu[2].held_choice();
  // The device: the same held state.
  const int np0 = (n0 + kPage - 1) / kPage, np1 = (n1 + kPage - 1) / kPage;
  const int64_t pages_ld = want + 1 + (np1 - np0);  // room for a held list (kernels.h)
  std::vector<int32_t> held_pages;
  for (int g = 0; g < H; ++g) held_pages.insert(held_pages.end(), chosen.begin(), chosen.end());
  const std::vector<double> u0d = unit_rows(q0, d), u1 = unit_rows(q1, d);
  const std::vector<float> u0(u0d.begin(), u0d.end());
  DeviceBuffer<int32_t> uses(std::vector<int32_t>{1, 1, every}), np(std::vector<int32_t>(H, np0)), count(std::vector<int32_t>(H, want));
  DeviceBuffer<int32_t> hp(held_pages);
  DeviceBuffer<float> du(u0), dq(q1);
  RecallHold h;
  h.uses = uses.get(), h.n_pages = np.get(), h.count = count.get(), h.pages = hp.get(), h.pages_ld = want, h.u = du.get();
  DeviceKvLayer dev(st.rows, 0, n1);
  DeviceBuffer<int32_t> held(static_cast<size_t>(H)), pages(static_cast<size_t>(H * pages_ld)), n_chosen(static_cast<size_t>(H));
  recall_hold_check(held.get(), dq.get(), n_heads, H, d, h, every, RecallStore::kHoldCos);
  const std::vector<int32_t> got_held = held.download();
  for (int g = 0; g < H; ++g) EXPECT_EQ(got_held[static_cast<size_t>(g)] != 0, cpu[static_cast<size_t>(g)].holds_choice(every, rows_of(q1, g).data(), group)) << "head " << g;
  EXPECT_EQ(got_held, (std::vector<int32_t>{1, 0, 0}));
  const int64_t ld = np1;
  DeviceBuffer<float> score(static_cast<size_t>(n_heads * ld));
  DeviceBuffer<uint8_t> scratch(recall_select_scratch_bytes(H, ld));
  recall_page_scores(score.get(), ld, dq.get(), n_heads, dev.view(), kPage, -1, nullptr, held.get());
  recall_select(pages.get(), pages_ld, n_chosen.get(), score.get(), ld, n_heads, dev.view(), kPage, want, scratch.get(), -1, 0, nullptr,
                held.get());
  recall_hold_update(pages.get(), pages_ld, n_chosen.get(), held.get(), h, dq.get(), n_heads, dev.view(), kPage);
  const std::vector<float> s = score.download(), got_u = du.download();
  const std::vector<int32_t> got = pages.download(), got_n = n_chosen.download(), got_uses = uses.download(), got_np = np.download(),
                             got_count = count.download(), got_hp = hp.download();
  for (int g = 0; g < H; ++g) {
    std::vector<int> want_pages;
    if (g == 0) {
      want_pages = cpu[0].held_choice();
      EXPECT_EQ(want_pages, (std::vector<int>{1, 4, 6, 7, 8, 9}));
      EXPECT_EQ(got_uses[0], 2);
    } else {
      std::vector<float> sg(static_cast<size_t>(group) * np1);
      for (int r = 0; r < group; ++r)
        for (int p = 0; p < np1; ++p) sg[static_cast<size_t>(r * np1 + p)] = s[static_cast<size_t>((g * group + r) * ld + p)];
      cpu[static_cast<size_t>(g)].select_scored(rows_of(q1, g).data(), sg.data(), group, want, &want_pages);
      EXPECT_EQ(got_uses[static_cast<size_t>(g)], 1) << "head " << g;
      EXPECT_EQ(got_np[static_cast<size_t>(g)], np1) << "head " << g;
      ASSERT_EQ(got_count[static_cast<size_t>(g)], static_cast<int>(want_pages.size())) << "head " << g;
      for (size_t i = 0; i < want_pages.size(); ++i) EXPECT_EQ(got_hp[static_cast<size_t>(g) * want + i], want_pages[i]) << "head " << g;
      for (int i = (g * group) * d; i < (g + 1) * group * d; ++i)
        EXPECT_NEAR(got_u[static_cast<size_t>(i)], u1[static_cast<size_t>(i)], 1e-6) << "head " << g << " element " << i;
    }
    ASSERT_EQ(got_n[static_cast<size_t>(g)], static_cast<int>(want_pages.size())) << "head " << g;
    for (size_t i = 0; i < want_pages.size(); ++i) EXPECT_EQ(got[static_cast<size_t>(g) * pages_ld + i], want_pages[i]) << "head " << g;
  }
  // Head 0's choice, untouched, still in the held state.
  EXPECT_EQ(std::vector<int32_t>(got_hp.begin(), got_hp.begin() + want), (std::vector<int32_t>{1, 4, 6}));
  EXPECT_EQ(got_np[0], np0);
}

TEST(KernelRecall, PageChoiceIsTheCpusOnTheSameScores) {
  const std::vector<int> n{400, 150, 0, 9};  // 25 pages, 10 (a ragged last), none, one short page
  const int d = 32, n_heads = 8, H = 4;
  Stores st(H, d, KvType::F32, n, 9);
  DeviceKvLayer dev(st.rows, 0, store_capacity(n));
  const int np_all = score_pages(n);
  const int64_t ld = np_all + 5;
  // Scores from the keys.
  const std::vector<float> q = random_floats(static_cast<size_t>(n_heads) * d, 3, -1.5f, 1.5f);
  DeviceBuffer<float> dq(q), score(static_cast<size_t>(n_heads) * ld);
  recall_page_scores(score.get(), ld, dq.get(), n_heads, dev.view(), kPage);
  const std::vector<float> keyed = score.download();
  for (const int want : {1, 4, 10, 24, 25, 40}) expect_select_as_cpu(keyed, ld, n_heads, st, n, want, "keys want " + std::to_string(want));
  // Scores of a few values, so that many pages tie at the cut: the later ones go in.
  std::vector<float> tied(static_cast<size_t>(n_heads) * ld, 0.0f);
  std::mt19937 rng(11);
  for (float& x : tied) x = static_cast<float>(rng() % 3);
  for (const int want : {1, 5, 9, 13}) expect_select_as_cpu(tied, ld, n_heads, st, n, want, "ties want " + std::to_string(want));
  // want 0 chooses nothing.
  expect_select_as_cpu(keyed, ld, n_heads, st, n, 0, "want 0");
  // One token's rows among three tokens' scored together, as a prompt chunk's last tokens are
  // (row (g * 3 + t) * group + r): each token's choice is made from its own rows only.
  const int tokens = 3;
  const std::vector<float> q3 = random_floats(static_cast<size_t>(tokens * n_heads) * d, 4, -1.5f, 1.5f);
  DeviceBuffer<float> dq3(q3), score3(static_cast<size_t>(tokens * n_heads) * ld);
  recall_page_scores(score3.get(), ld, dq3.get(), tokens * n_heads, dev.view(), kPage);
  const std::vector<float> keyed3 = score3.download();
  const int group = n_heads / H;
  for (int t = 0; t < tokens; ++t)
    for (const int want : {1, 4, 10})
      expect_select_as_cpu(keyed3, ld, n_heads, st, n, want, "token " + std::to_string(t) + " of 3, want " + std::to_string(want),
                           static_cast<int64_t>(t) * group, static_cast<int64_t>(tokens) * group);
}

struct AttnCase {
  int head_dim, n_heads;
  std::vector<int> held, stored;        // exact rows and store rows per KV head
  std::vector<std::vector<int>> chosen;  // pages each KV head attends
  int window = 0, split_len = 32;
  float softcap = 0.0f;
};

// ptaa_decode with the chosen pages against float64 attention over the exact cache's visible rows
// and the chosen pages' visible rows, as stored.
void run_attention(const AttnCase& c, KvType tk, KvType tv, KvType ts, uint32_t seed) {
  const int d = c.head_dim, H = static_cast<int>(c.held.size()), group = c.n_heads / H;
  const int32_t qpos = 2 * store_capacity(c.stored) + 40;
  const int cap = std::max(1, *std::max_element(c.held.begin(), c.held.end()));
  KvCache exact(1, H, d, cap, 0, tk, tv);
  for (int g = 0; g < H; ++g) {
    KvHead& kh = exact.head(0, g);
    const int m = c.held[static_cast<size_t>(g)];
    set_rows(kh, random_floats(static_cast<size_t>(m) * d, seed + 3 * g, -1.0f, 1.0f), random_floats(static_cast<size_t>(m) * d, seed + 3 * g + 1), d);
    kh.pos.resize(static_cast<size_t>(m));
    // After the store's positions; the last one after the query (not visible).
    for (int j = 0; j < m; ++j) kh.pos[static_cast<size_t>(j)] = j + 1 < m ? qpos - (m - 1 - j) : qpos + 5;
    kh.n = m;
  }
  Stores st(H, d, ts, c.stored, seed + 100);
  DeviceKvLayer dev(exact, 0, cap), dstore(st.rows, 0, store_capacity(c.stored));
  int max_chosen = 0;
  for (const auto& p : c.chosen) max_chosen = std::max(max_chosen, static_cast<int>(p.size()));
  const int64_t pages_ld = std::max(1, max_chosen);
  std::vector<int32_t> hp(static_cast<size_t>(H * pages_ld), 0), hn(static_cast<size_t>(H));
  for (int g = 0; g < H; ++g) {
    hn[static_cast<size_t>(g)] = static_cast<int32_t>(c.chosen[static_cast<size_t>(g)].size());
    for (size_t i = 0; i < c.chosen[static_cast<size_t>(g)].size(); ++i) hp[static_cast<size_t>(g) * pages_ld + i] = c.chosen[static_cast<size_t>(g)][i];
  }
  DeviceBuffer<int32_t> pages(hp), n_chosen(hn);
  RecallView rc;
  rc.store = dstore.view(), rc.page = kPage, rc.pages = pages.get(), rc.pages_ld = pages_ld, rc.n_chosen = n_chosen.get();
  rc.max_chosen = max_chosen;
  KvLayerView kv = dev.view();
  kv.softcap = c.softcap;
  const std::vector<float> q = random_floats(static_cast<size_t>(c.n_heads) * d, seed + 50, -1.5f, 1.5f);
  DeviceBuffer<float> dq(q), out(static_cast<size_t>(c.n_heads) * d);
  DeviceBuffer<float> scratch(ptaa_scratch_floats(c.n_heads, d, ptaa_splits(cap, c.split_len, rc)));
  ptaa_decode(out.get(), dq.get(), qpos, c.n_heads, kv, LinearStateView{}, c.window, cap, c.split_len, scratch.get(), rc);
  const std::vector<float> got = out.download();

  const auto visible = [&](int32_t p) { return p <= qpos && (c.window <= 0 || p > qpos - c.window); };
  std::vector<double> want(static_cast<size_t>(c.n_heads) * d, 0.0);
  for (int h = 0; h < c.n_heads; ++h) {
    const int g = h / group;
    std::vector<std::pair<double, std::vector<double>>> terms;  // (logit, value)
    const auto take = [&](const KvHead& kh, int j) {
      if (!visible(kh.pos[static_cast<size_t>(j)])) return;
      const std::vector<double> k = row_of(kh, true, j, d);
      double x = 0.0;
      for (int i = 0; i < d; ++i) x += static_cast<double>(q[static_cast<size_t>(h) * d + i]) * k[static_cast<size_t>(i)];
      terms.emplace_back(soft_cap(x / std::sqrt(static_cast<double>(d)), static_cast<double>(c.softcap)), row_of(kh, false, j, d));
    };
    for (int j = 0; j < exact.head(0, g).n; ++j) take(exact.head(0, g), j);
    const KvHead& sh = st.rows.head(0, g);
    for (const int p : c.chosen[static_cast<size_t>(g)])
      for (int j = p * kPage; j < std::min(sh.n, (p + 1) * kPage); ++j) take(sh, j);
    if (terms.empty()) continue;  // nothing visible: zeros
    double mx = -INFINITY, den = 0.0;
    for (const auto& t : terms) mx = std::max(mx, t.first);
    for (const auto& t : terms) {
      const double e = std::exp(t.first - mx);
      den += e;
      for (int i = 0; i < d; ++i) want[static_cast<size_t>(h) * d + i] += e * t.second[static_cast<size_t>(i)];
    }
    for (int i = 0; i < d; ++i) want[static_cast<size_t>(h) * d + i] /= den;
  }
  expect_close(got, want, 2e-5, 1e-4, "d=" + std::to_string(d) + " window=" + std::to_string(c.window) + kv_types_label(tk, tv) +
                                         " store=" + kv_type_name(ts));
}

TEST(KernelRecall, DecodeAttentionOverTheExactCacheAndTheChosenPagesEqualsFloat64) {
  // Head 0: three pages out of order of choice, one of them the ragged last; head 1: every page;
  // head 2: nothing chosen; head 3: an empty exact cache and one page.
  const AttnCase a{64, 8, {40, 33, 20, 0}, {100, 64, 30, 16}, {{0, 2, 6}, {0, 1, 2, 3}, {}, {0}}};
  for (const auto& [tk, tv] : device_row_types(64))
    for (const KvType ts : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) run_attention(a, tk, tv, ts, 1);
  // A sliding window that reaches into the store's last positions, a soft cap, splits of one page
  // and of several, a head dim off the warp's width, and a group of 6.
  AttnCase b{40, 12, {50, 9}, {200, 90}, {{1, 5, 12}, {0, 3, 4, 5}}, 64, 16, 0.5f};
  run_attention(b, KvType::F32, KvType::F32, KvType::F16, 2);
  b.split_len = 100, b.window = 0;
  run_attention(b, KvType::F16, KvType::F16, KvType::F32, 3);
}

TEST(KernelRecall, EveryPageOfALosslessStoreGivesTheFullCachesAttention) {
  // A cache of 300 rows; the policy kept 70 of them and the store holds the other 230, in position
  // order. With every page recalled the attention is the full cache's (the CPU's attend_rows).
  const int d = 64, n_heads = 6, H = 2, n_all = 300, group = n_heads / H;
  KvCache full(1, H, d, n_all, 0, KvType::F32, KvType::F32), exact(1, H, d, n_all, 0, KvType::F32, KvType::F32),
      store(1, H, d, n_all, 0, KvType::F32, KvType::F32);
  std::mt19937 rng(21);
  for (int g = 0; g < H; ++g) {
    const std::vector<float> k = random_floats(static_cast<size_t>(n_all) * d, 30 + g, -1.0f, 1.0f);
    const std::vector<float> v = random_floats(static_cast<size_t>(n_all) * d, 40 + g);
    std::vector<float> ke, ve, ks, vs;
    std::vector<int32_t> pe, ps;
    for (int j = 0; j < n_all; ++j) {
      const bool kept = rng() % 100 < 23 || j >= n_all - 8;
      auto& kk = kept ? ke : ks;
      auto& vv = kept ? ve : vs;
      kk.insert(kk.end(), k.begin() + static_cast<long>(j) * d, k.begin() + static_cast<long>(j + 1) * d);
      vv.insert(vv.end(), v.begin() + static_cast<long>(j) * d, v.begin() + static_cast<long>(j + 1) * d);
      (kept ? pe : ps).push_back(3 * j);
    }
    const auto fill = [&](KvHead& kh, const std::vector<float>& kk, const std::vector<float>& vv, const std::vector<int32_t>& pp) {
      set_rows(kh, kk, vv, d);
      kh.pos = pp;
      kh.n = static_cast<int>(pp.size());
    };
    std::vector<int32_t> pa(static_cast<size_t>(n_all));
    for (int j = 0; j < n_all; ++j) pa[static_cast<size_t>(j)] = 3 * j;
    fill(full.head(0, g), k, v, pa);
    fill(exact.head(0, g), ke, ve, pe);
    fill(store.head(0, g), ks, vs, ps);
  }
  const int32_t qp = 3 * n_all;
  DeviceKvLayer dev(exact, 0, n_all), dstore(store, 0, n_all);
  std::vector<int32_t> hp(static_cast<size_t>(H) * 32), hn(static_cast<size_t>(H));
  int max_chosen = 0;
  for (int g = 0; g < H; ++g) {
    const int np = (store.head(0, g).n + kPage - 1) / kPage;
    hn[static_cast<size_t>(g)] = np;
    max_chosen = std::max(max_chosen, np);
    for (int p = 0; p < np; ++p) hp[static_cast<size_t>(g) * 32 + p] = p;
  }
  DeviceBuffer<int32_t> pages(hp), n_chosen(hn);
  RecallView rc;
  rc.store = dstore.view(), rc.page = kPage, rc.pages = pages.get(), rc.pages_ld = 32, rc.n_chosen = n_chosen.get(), rc.max_chosen = max_chosen;
  const std::vector<float> q = random_floats(static_cast<size_t>(n_heads) * d, 8, -1.5f, 1.5f);
  DeviceBuffer<float> dq(q), out(static_cast<size_t>(n_heads) * d);
  DeviceBuffer<float> scratch(ptaa_scratch_floats(n_heads, d, ptaa_splits(n_all, 64, rc)));
  ptaa_decode(out.get(), dq.get(), qp, n_heads, dev.view(), LinearStateView{}, 0, n_all, 64, scratch.get(), rc);
  std::vector<float> want(static_cast<size_t>(n_heads) * d);
  for (int h = 0; h < n_heads; ++h) {
    const float* qr = q.data() + static_cast<size_t>(h) * d;
    float m = 0.0f, l = 0.0f;
    attend_rows(&qr, &qp, 1, full.head(0, h / group), d, 0, 0.0f, want.data() + static_cast<size_t>(h) * d, &m, &l);
    for (int i = 0; i < d; ++i) want[static_cast<size_t>(h) * d + i] /= l;
  }
  expect_close(out.download(), want, 2e-5, 1e-4, "every page recalled");
}

TEST(KernelRecall, RecallBesideALinearStateIsRefused) {
  const std::vector<int> n{20};
  Stores st(1, 32, KvType::F32, n, 1);
  KvCache exact(1, 1, 32, 4, 0, KvType::F32, KvType::F32);
  DeviceKvLayer dev(exact, 0, 4), dstore(st.rows, 0, 20);
  DeviceBuffer<int32_t> pages(std::vector<int32_t>{0}), n_chosen(std::vector<int32_t>{1});
  RecallView rc;
  rc.store = dstore.view(), rc.page = kPage, rc.pages = pages.get(), rc.pages_ld = 1, rc.n_chosen = n_chosen.get(), rc.max_chosen = 1;
  DeviceBuffer<float> q(32), out(32), scratch(ptaa_scratch_floats(1, 32, ptaa_splits(4, 16, rc)));
  EXPECT_THROW(ptaa_decode(out.get(), q.get(), 100, 1, dev.view(), dev.lin(), 0, 4, 16, scratch.get(), rc), Error);
}

}  // namespace
}  // namespace slake::gpu::test
