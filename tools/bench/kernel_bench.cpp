// Micro-benchmarks of the CPU kernels (Google Benchmark): matmul for every weight type at the
// decode shape (one token: bound by reading the weights) and at a prefill shape (64 tokens: bound
// by arithmetic), on TinyLlama-1.1B's FFN matrix (5632 x 2048), in the layout the CPU path gives a
// model's matrix (Q8_0, the 32-element types and the K-quants repacked where this build does:
// "repacked" in the label). Counters: weight GB/s and GFLOP/s (2 K N tokens per product).
// slake-kernel-bench --bandwidth first prints the machine's read bandwidth (the decode ceiling)
// from the same probe as slake-bench; BM_fma_peak measures one core's fp32 FMA peak (the ceiling of
// the float-weight prefill figures). BM_attention compares the flash attention kernel with the
// scalar reference at decode and prefill shapes; BM_decode_scores times an attention-scored
// policy's decode-time ranking of one KV head, BM_recall_first_pass the recall store's low-rank
// page scores of one, BM_recall_attend its attention over the pages chosen.
//
//   build/bin/slake-kernel-bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "bandwidth_probe.h"
#include "slake/kv/attention.h"
#include "slake/kv/attention_rows.h"
#include "slake/quant/dtype.h"
#include "slake/quant/quant_blocks.h"
#include "slake/kv/kv_scores.h"
#include "slake/cpu/ops.h"
#include "slake/quant/quant_dot.h"
#include "slake/cpu/thread_pool.h"
#include "slake/quant/weight_pack.h"

namespace {

using slake::DType;

constexpr int64_t kK = 2048, kN = 5632;

// `bytes` of blocks of any type: random bytes with finite fp16 scales (0.01) in every block.
std::vector<uint8_t> random_blocks(DType t, size_t bytes, uint32_t seed) {
  std::vector<uint8_t> w(bytes);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < w.size(); i += 4) {
    const uint32_t r = rng();
    std::memcpy(&w[i], &r, std::min<size_t>(4, w.size() - i));
  }
  const uint16_t scale = slake::fp32_to_fp16(0.01f);
  const auto& info = slake::dtype_info(t);
  if (t == DType::F16 || t == DType::BF16) {  // keep the values finite
    for (size_t i = 0; i < w.size(); i += 2) {
      const uint16_t v = t == DType::F16 ? slake::fp32_to_fp16(static_cast<float>(w[i]) / 256.0f - 0.5f)
                                         : slake::fp32_to_bf16(static_cast<float>(w[i]) / 256.0f - 0.5f);
      std::memcpy(&w[i], &v, 2);
    }
  } else if (t == DType::F32) {
    for (size_t i = 0; i < w.size(); i += 4) {
      const float v = static_cast<float>(w[i]) / 256.0f - 0.5f;
      std::memcpy(&w[i], &v, 4);
    }
  } else {
    for (size_t b = 0; b < w.size(); b += static_cast<size_t>(info.block_bytes))  // finite fp16 scales
      for (int off : slake::quant::fp16_fields(t)) std::memcpy(&w[b + static_cast<size_t>(off)], &scale, 2);
  }
  return w;
}

// Random weights of any type, TinyLlama's FFN matrix.
std::vector<uint8_t> random_weights(DType t) { return random_blocks(t, slake::row_bytes(t, kK) * kN, 1); }

// Appends `rows` rows at positions 0, 1, ... to layer 0 of `cache` (n_kv heads of d): each row's
// keys key_scale * N(0, 1), then its values N(0, 1), drawn from g and rng.
void fill_random_rows(slake::KvCache& cache, int n_kv, int d, int rows, float key_scale, std::mt19937& rng,
                      std::normal_distribution<float>& g) {
  std::vector<float> k(static_cast<size_t>(n_kv) * d), v(k.size());
  for (int j = 0; j < rows; ++j) {
    for (auto& x : k) x = key_scale * g(rng);
    for (auto& x : v) x = g(rng);
    cache.append(0, k.data(), v.data(), j);
  }
}

void BM_matmul(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const int64_t tokens = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  // Copies of the matrix, used in turn, so that the weights come from memory, not from the
  // last-level cache (260 MiB here), as they do in a forward pass. Each copy is in the layout a
  // model's matrix has on the CPU path: repacked where this build does (weight_pack.h).
  const auto w = random_weights(t);
  const size_t copies = std::max<size_t>(1, (size_t{768} << 20) / w.size());
  std::vector<uint8_t> all(w.size() * copies);
  std::vector<slake::TensorView> views(copies);
  bool repacked = false;
  for (size_t c = 0; c < copies; ++c) {
    std::memcpy(&all[c * w.size()], w.data(), w.size());
    slake::TensorView& W = views[c];
    W.type = t;
    W.ne = {kK, kN};
    W.nbytes = w.size();
    W.data = &all[c * w.size()];
    repacked = slake::repack_in_place(W);
  }
  size_t next = 0;
  std::vector<float> x(static_cast<size_t>(tokens * kK)), out(static_cast<size_t>(tokens * kN));
  std::mt19937 rng(2);
  std::normal_distribution<float> g;
  for (auto& v : x) v = g(rng);
  slake::ThreadPool pool(threads);
  for (auto _ : state) {
    slake::matmul(out.data(), x.data(), tokens, views[next], pool);
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(slake::dtype_name(t)) + (repacked ? " repacked" : "") + " tokens=" + std::to_string(tokens) +
                 " threads=" + std::to_string(threads));
  state.counters["weight_GBps"] = benchmark::Counter(static_cast<double>(w.size()) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * kK * kN * static_cast<double>(tokens) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::IQ4_NL, DType::Q2_K,
                  DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS})
    for (int64_t tokens : {1, 64})
      for (int threads : {1, 2}) b->Args({static_cast<int64_t>(t), tokens, threads});
}
BENCHMARK(BM_matmul)->Apply(matmul_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Attention of `tokens` queries at the end of a cache of `keys` tokens, TinyLlama's layer shape
// (32 query heads over 4 KV heads of 64): kernel 0 is the scalar reference (attention_one per
// query and head, as the CPU path ran before the flash kernel), kernel 1 attention_prefill (the
// flash kernel over GQA row blocks), kernel 2 a decode step of an attention-scored policy (the
// group's scores once per KV head, DecodeRowScores, then attention_decode from them), kernel 3
// a decode step's flash attention in SmolLM2's shape (9 query heads over 3 KV heads of 64: a
// group of 3, the few-rows kernel where the build has it). Counters: GFLOP/s (2 d per score and per value row, over the
// visible pairs) and KV GB/s (the cache bytes per call over the time: decode's bound).
void BM_attention(benchmark::State& state) {
  const int kernel = static_cast<int>(state.range(0));
  const int tokens = static_cast<int>(state.range(1)), keys = static_cast<int>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  const slake::AttentionShape s = kernel == 3 ? slake::AttentionShape{9, 3, 64, 0} : slake::AttentionShape{32, 4, 64, 0};
  const int d = s.head_dim, qd = s.n_heads * d, kvd = s.n_kv_heads * d, group = s.n_heads / s.n_kv_heads;
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  slake::KvCache cache(1, s.n_kv_heads, d, keys);
  fill_random_rows(cache, s.n_kv_heads, d, keys, 1.0f, rng, g);
  std::vector<float> q(static_cast<size_t>(tokens) * qd), out(q.size());
  for (auto& x : q) x = g(rng);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  double pairs = 0;
  for (int t = 0; t < tokens; ++t) {
    pos[static_cast<size_t>(t)] = keys - tokens + t;
    pairs += keys - tokens + t + 1;
  }
  slake::ThreadPool pool(threads);
  std::vector<slake::DecodeRowScores> xs(static_cast<size_t>(s.n_kv_heads));
  for (auto _ : state) {
    if (kernel == 1 || kernel == 3) {
      slake::attention_prefill(out.data(), q.data(), pos.data(), tokens, cache, 0, s, pool);
    } else if (kernel == 2) {
      pool.parallel_for(s.n_kv_heads, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t g = b; g < e; ++g)
          xs[static_cast<size_t>(g)].compute(q.data() + g * group * d, group, pos[0], cache.head(0, static_cast<int>(g)), d, 0.0f);
      });
      slake::attention_decode(out.data(), q.data(), pos[0], cache, 0, s, xs, pool);
    } else {
      pool.parallel_for(static_cast<int64_t>(tokens) * s.n_heads, 4, [&](int64_t b, int64_t e, int) {
        for (int64_t w = b; w < e; ++w) {
          const int64_t t = w / s.n_heads, h = w % s.n_heads, off = t * qd + h * d;
          slake::attention_one(out.data() + off, q.data() + off, pos[static_cast<size_t>(t)],
                               cache.head(0, static_cast<int>(h) / group), d, 0);
        }
      });
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(kernel == 3 ? "flash, group of 3" : kernel == 2 ? "decode-scored" : kernel == 1 ? "flash" : "reference") + " tokens=" + std::to_string(tokens) +
                 " keys=" + std::to_string(keys) + " threads=" + std::to_string(threads));
  state.counters["GFLOPs"] = benchmark::Counter(pairs * s.n_heads * 4.0 * d * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_GBps"] = benchmark::Counter(2.0 * keys * kvd * sizeof(float) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void attention_args(benchmark::internal::Benchmark* b) {
  for (int kernel : {0, 1, 2, 3})
    for (int tokens : {1, 64})
      for (int keys : {1024, 8192})
        for (int threads : {1, 2})
          if (kernel < 2 || tokens == 1) b->Args({kernel, tokens, keys, threads});
}
BENCHMARK(BM_attention)->Apply(attention_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The decode score of algorithm.md §5.3 for one KV head (decode_scores: the group's softmax over
// the rows, pooled along the candidates, averaged over the group), the part of an attention-scored
// policy's decode step that the full cache does not have. Arguments: rows held, group size (3:
// SmolLM2, 8: TinyLlama), pool (0: Avg5, SLAKE's; 1: Max7). The scores come from
// DecodeRowScores::compute once, outside the timing. Counter: rows per second.
void BM_decode_scores(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), group = static_cast<int>(state.range(1)), d = 64;
  const slake::TokenPool pool = state.range(2) == 0 ? slake::TokenPool::Avg5 : slake::TokenPool::Max7;
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  slake::KvCache cache(1, 1, d, rows);
  fill_random_rows(cache, 1, d, rows, 2.0f, rng, g);
  std::vector<float> q(static_cast<size_t>(group) * d);
  for (auto& x : q) x = g(rng);
  slake::DecodeRowScores xs;
  xs.compute(q.data(), group, rows, cache.head(0, 0), d, 0.0f);
  const int n_cand = rows - 32;
  std::vector<double> score(static_cast<size_t>(n_cand));
  for (auto _ : state) {
    slake::decode_scores(xs, n_cand, pool, score.data());
    benchmark::DoNotOptimize(score.data());
  }
  state.SetLabel(std::string(pool == slake::TokenPool::Avg5 ? "avg5" : "max7") + " rows=" + std::to_string(rows) +
                 " group=" + std::to_string(group));
  state.counters["rows_per_s"] = benchmark::Counter(rows, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_decode_scores)->ArgsProduct({{1056}, {3, 8}, {0, 1}})->Unit(benchmark::kMicrosecond);

// The observation window's statistics of one layer (window_stats: every observing query's softmax
// over the rows it sees, the candidates' mean and variance pooled along them, the entropy), what an
// evicting prefill computes once per layer, or once per layer and chunk with --prefill-chunk.
// Arguments: rows held (a chunk of 1024 after 1024 kept, or a 16K prompt), query heads over KV
// heads (SmolLM2's 9 over 3, TinyLlama's 32 over 4), f16 rows, 32 observing queries, one thread.
void BM_window_stats(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), n_heads = static_cast<int>(state.range(1)),
            n_kv = static_cast<int>(state.range(2)), d = 64, n_obs = 32, window = 32;
  std::mt19937 rng(6);
  std::normal_distribution<float> g;
  slake::KvCache cache(1, n_kv, d, rows, 0, slake::KvType::F16, slake::KvType::F16);
  fill_random_rows(cache, n_kv, d, rows, 2.0f, rng, g);
  std::vector<float> q(static_cast<size_t>(n_obs) * n_heads * d);
  for (auto& x : q) x = g(rng);
  slake::ThreadPool pool(1);
  for (auto _ : state) {
    const slake::LayerStats st = slake::window_stats(q.data(), rows, n_obs, rows - window, cache, 0,
                                                     slake::AttentionShape{n_heads, n_kv, d, 0}, 0.0, slake::TokenPool::Max7, pool);
    benchmark::DoNotOptimize(st.entropy);
  }
  state.SetLabel("rows=" + std::to_string(rows) + " heads=" + std::to_string(n_heads) + "/" + std::to_string(n_kv));
}
BENCHMARK(BM_window_stats)->ArgsProduct({{2048, 16384}, {9}, {3}})->ArgsProduct({{2048}, {32}, {4}})->Unit(benchmark::kMicrosecond);

// The recall store's low-rank first pass for one KV head (kv_recall.h, RecallStore::lowrank_scores):
// each stored key's 16 int8 coordinates (a head dimension of 64) against the group's query rows,
// each 16-key page's largest, by max_dot_lanes16_u8 in calls of up to kTileTokens rows. Arguments:
// stored keys (16K: 288 KiB of coordinates, in the core's cache after the first run; 4M: 72 MiB,
// streamed from memory as a decode step streams a long store's), group size (3: SmolLM2, 8:
// TinyLlama). Counter: keys per second.
void BM_recall_first_pass(benchmark::State& state) {
  const int keys = static_cast<int>(state.range(0)), group = static_cast<int>(state.range(1)), r = 16;
  const int n_tiles = keys / 16;
  const size_t stride = 32 + static_cast<size_t>(16 * r);
  std::mt19937 rng(7);
  std::vector<uint8_t> tiles(static_cast<size_t>(n_tiles) * stride);
  for (size_t t = 0; t < static_cast<size_t>(n_tiles); ++t) {
    for (int j = 0; j < 16; ++j) {
      const uint16_t h = slake::fp32_to_fp16(0.01f + static_cast<float>(rng() % 100) * 0.01f);
      std::memcpy(&tiles[t * stride + 2 * static_cast<size_t>(j)], &h, 2);
    }
    for (size_t b = 32; b < stride; ++b) tiles[t * stride + b] = static_cast<uint8_t>(rng());
  }
  std::vector<int8_t> q(static_cast<size_t>(group) * r);
  std::vector<float> q_scale(static_cast<size_t>(group), 0.01f);
  std::vector<int32_t> q_sum(static_cast<size_t>(group), 0);
  for (int k = 0; k < group; ++k)
    for (int i = 0; i < r; ++i) q_sum[static_cast<size_t>(k)] += q[static_cast<size_t>(k * r + i)] = static_cast<int8_t>(rng() % 255 - 127);
  std::vector<float> out(static_cast<size_t>(group) * n_tiles);
  for (auto _ : state) {
    for (int r0 = 0; r0 < group; r0 += slake::kTileTokens)
      slake::max_dot_lanes16_u8(r, tiles.data(), stride, n_tiles, 16, q.data() + static_cast<size_t>(r0) * r, static_cast<size_t>(r),
                                q_scale.data() + r0, q_sum.data() + r0, std::min(slake::kTileTokens, group - r0),
                                out.data() + static_cast<size_t>(r0) * n_tiles, static_cast<size_t>(n_tiles));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel("keys=" + std::to_string(keys) + " group=" + std::to_string(group));
  state.counters["keys_per_s"] = benchmark::Counter(keys, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_recall_first_pass)->ArgsProduct({{16384, 4194304}, {3, 8}})->Unit(benchmark::kMicrosecond);

// A decode step's recall part for one KV head (RowBlock::attend_paged, as RecallStore::attend runs
// it): the group's query rows over 32 pages of 16 q8_0 rows (keys and values, a head dimension of
// 64) chosen at random, a new choice each iteration. Arguments: stored keys (16K: 2.1 MiB, in the
// caches after a few runs; 2M: 272 MiB, so that each page is read from memory as a long store's
// are), group size. Counter: recalled rows per second.
void BM_recall_attend(benchmark::State& state) {
  const int keys = static_cast<int>(state.range(0)), group = static_cast<int>(state.range(1)), d = 64, page = 16, want = 32;
  const slake::KvType type = slake::KvType::Q8_0;
  const size_t row = slake::row_bytes(DType::Q8_0, d);
  std::mt19937 rng(9);
  std::normal_distribution<float> g;
  const std::vector<uint8_t> k = random_blocks(DType::Q8_0, static_cast<size_t>(keys) * row, 10),
                             v = random_blocks(DType::Q8_0, k.size(), 11);
  std::vector<int32_t> pos(static_cast<size_t>(keys));
  std::iota(pos.begin(), pos.end(), 0);
  constexpr int kChoices = 4096;  // 272 MiB of pages at 2M keys: no choice finds the last one's in cache
  std::vector<int> choices(static_cast<size_t>(kChoices) * want);
  for (int c = 0; c < kChoices; ++c) {
    int* ch = choices.data() + static_cast<size_t>(c) * want;
    std::set<int> pages;  // distinct, increasing
    while (static_cast<int>(pages.size()) < want) pages.insert(static_cast<int>(rng() % static_cast<uint32_t>(keys / page)));
    std::copy(pages.begin(), pages.end(), ch);
  }
  std::vector<float> q(static_cast<size_t>(group) * d), acc(static_cast<size_t>(group) * d), m(static_cast<size_t>(group)),
      l(static_cast<size_t>(group));
  for (auto& e : q) e = g(rng);
  std::vector<const float*> qr(static_cast<size_t>(group));
  std::vector<int32_t> qpos(static_cast<size_t>(group), keys);
  for (int r = 0; r < group; ++r) qr[static_cast<size_t>(r)] = q.data() + static_cast<size_t>(r) * d;
  slake::RowBlock block;
  int c = 0;
  for (auto _ : state) {
    const slake::PagedRows pr{type, k.data(), v.data(), row, pos.data(), keys, page, choices.data() + static_cast<size_t>(c) * want, want};
    c = (c + 1) % kChoices;
    block.begin(qr.data(), qpos.data(), group, d, 0.0f);
    block.attend_paged(pr, 0);
    block.finish(acc.data(), m.data(), l.data());
    benchmark::DoNotOptimize(acc.data());
  }
  state.SetLabel("keys=" + std::to_string(keys) + " group=" + std::to_string(group));
  state.counters["rows_per_s"] = benchmark::Counter(want * page, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_recall_attend)->ArgsProduct({{16384, 2097152}, {3, 8}})->Unit(benchmark::kMicrosecond);

// The core's fp32 FMA peak: twelve independent chains of vector FMAs (enough to cover the FMA
// latency on every port), the ceiling for the float-weight prefill figures above.
void BM_fma_peak(benchmark::State& state) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int kLanes = 16;
#define SLAKE_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SLAKE_SET1(x) _mm512_set1_ps(x)
#else
  using V = __m256;
  constexpr int kLanes = 8;
#define SLAKE_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SLAKE_SET1(x) _mm256_set1_ps(x)
#endif
  constexpr int kChains = 12, kSteps = 1000;
  V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = SLAKE_SET1(static_cast<float>(c));
  const V m = SLAKE_SET1(0.999f), a = SLAKE_SET1(1e-3f);
  for (auto _ : state) {
    for (int s = 0; s < kSteps; ++s)
      for (int c = 0; c < kChains; ++c) acc[c] = SLAKE_FMA(acc[c], m, a);
    benchmark::DoNotOptimize(acc);
  }
#undef SLAKE_FMA
#undef SLAKE_SET1
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * kLanes * kChains * kSteps * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_fma_peak)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  bool bandwidth = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bandwidth") == 0) bandwidth = true;
    else args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::AddCustomContext("dot_kernels", slake::dot_kernel_isa());
  if (bandwidth) {
    for (int threads : {1, 2}) {
      slake::ThreadPool pool(threads);
      std::printf("memory read bandwidth, %d thread(s): %.1f GB/s\n", threads,
                  slake::bench::measure_read_bandwidth(pool) * 1e-9);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
