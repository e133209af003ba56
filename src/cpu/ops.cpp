#include "slake/cpu/ops.h"

#include "matmul_amx.h"
#include "matmul_panel.h"
#include "slake/cpu/cpu_weights.h"
#include "slake/cpu/lanes.h"
#include "slake/error.h"
#include "slake/quant/quant_dot.h"
#include "slake/quant/weight_pack.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace slake {

float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float sum = _mm_cvtss_f32(h);
#else
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

namespace {
// Dequantises a 1-D weight into a thread-local buffer and returns it.
const float* weight_vector(const TensorView& w, int64_t n) {
  if (w.type == DType::F32) return reinterpret_cast<const float*>(w.data);
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(n));
  dequantize_row(w.type, w.data, buf.data(), n);
  return buf.data();
}
}  // namespace

void rmsnorm(float* out, const float* x, const TensorView& w, int64_t n, float eps) {
  const float* wv = weight_vector(w, n);
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = wv[i] * (x[i] * scale);
}

void add_bias_rows(float* x, const TensorView& b, int64_t rows, int64_t n) {
  const float* bv = weight_vector(b, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bv[i];
}

void rmsnorm_rows(float* out, const float* x, const TensorView& w, int64_t rows, int64_t n, float eps, ThreadPool& pool) {
  pool.parallel_for(rows, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) rmsnorm(out + r * n, x + r * n, w, n, eps);
  });
}

namespace {

// Fewest tokens for which float weights go through the panel kernel.
constexpr int64_t kPanelMinTokens = kMatmulExactRows + 1;

// Prompt-sized Q8_0/Q4_0 products on AMX: rows in groups of 16 per chunk, the rest on VNNI.
bool use_amx(DType t, int64_t n_tokens, int64_t N) {
  return (t == DType::Q8_0 || t == DType::Q4_0) && n_tokens > kMatmulExactRows && N >= 16 && amx_available();
}

}  // namespace

void matmul(float* out, const float* x, int64_t n_tokens, const TensorView& W, ThreadPool& pool) {
  const int64_t K = W.row_len(), N = W.n_rows();
  const size_t wb = row_bytes(W.type, K);
  // Activations are prepared once (quantised per block for quantised weights), then each chunk of
  // rows is swept by register tiles of kTileRows rows x kTileTokens tokens: the chunk's weights
  // stay in cache while every token passes over them.
  const bool amx = use_amx(W.type, n_tokens, N);
  // AMX reads Q8_0 activations whatever the layout; the rows it leaves (N % 16) are in Rows or X4,
  // whose kernels take Q8_0 too (an X16 matrix has whole groups of 16).
  const ActFormat fmt = amx ? act_format(W.type) : act_format(W.type, W.layout);
  const size_t ab = act_row_bytes(fmt, K);
  const bool x4 = W.layout == WeightLayout::X4;  // groups of kGroupRows rows (weight_pack.h)
  const bool x8 = W.layout == WeightLayout::X8;  // groups of kGroupRowsX8 rows
  const bool x16 = W.layout == WeightLayout::X16;  // groups of kGroupRowsX16 rows
  // Float weights at prompt sizes: outer products over k-major panels (matmul_panel.cpp).
  const bool panel = fmt == ActFormat::F32 && n_tokens >= kPanelMinTokens && panel_available();
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  thread_local std::vector<uint8_t> act_buf;
  thread_local std::vector<float> act_scales;
  if (fmt != ActFormat::F32) {
    // AMX reads whole groups of 16 tokens: the rows past n_tokens are zero.
    const int64_t rows = amx ? (n_tokens + 15) / 16 * 16 : n_tokens;
    act_buf.assign(static_cast<size_t>(rows) * ab, 0);
    uint8_t* dst = act_buf.data();
    const auto quantize = [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) quantize_act_row(fmt, x + t * K, dst + static_cast<size_t>(t) * ab, K);
    };
    if (n_tokens >= 2 * pool.size()) pool.parallel_for(n_tokens, 1, quantize);
    else quantize(0, n_tokens, 0);
    act = dst;
    if (amx) {
      const int64_t nb = K / 32;
      act_scales.assign(static_cast<size_t>(rows * nb), 0.0f);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t b = 0; b < nb; ++b)
          act_scales[static_cast<size_t>(t * nb + b)] =
              fp16_to_fp32(reinterpret_cast<const ActBlockQ8_0*>(dst + static_cast<size_t>(t) * ab)[b].d);
    }
  }
  // Chunks: a multiple of the tile height (16 rows on AMX), small enough for every thread to get
  // several.
  const float* scales = act_scales.data();  // thread_local: the workers must not name it
  const int64_t unit = amx ? 16 : x16 ? kGroupRowsX16 : x8 ? kGroupRowsX8 : kTileRows;
  int64_t chunk = std::max<int64_t>(unit, std::min<int64_t>(64, N / (4 * pool.size())));
  chunk -= chunk % unit;
  // Decode reads every weight once: one contiguous run of rows per thread keeps each core's
  // stream sequential for the prefetchers (F16 tg128 on the TinyLlama shape: 22 -> 24 tokens/s).
  if (n_tokens == 1) chunk = std::max<int64_t>(unit, (N / pool.size() + unit - 1) / unit * unit);
  const float* packed = nullptr;
  if (panel) {
    chunk = kPanelRows;
    thread_local std::vector<float> packed_buf;
    packed_buf.resize(static_cast<size_t>(n_tokens * K));
    float* dst = packed_buf.data();
    pool.parallel_for(n_tokens, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t j = b; j < e; ++j) pack_panel_tile(x, K, n_tokens, j, dst);  // by whoever gets its first token
    });
    packed = dst;
  }
  const int64_t tile_rows = tile_rows_max(W.type);
  const int64_t n_chunks = (N + chunk - 1) / chunk;
  pool.parallel_for(n_chunks, 1, [&](int64_t cb, int64_t ce, int) {
    for (int64_t c = cb; c < ce; ++c) {
      int64_t r0 = c * chunk;
      const int64_t r1 = std::min(N, r0 + chunk);
      if (panel) {
        struct alignas(64) Panel {
          float v[kPanelRows * kPanelK];
        };
        thread_local const std::unique_ptr<Panel> scratch = std::make_unique<Panel>();
        panel_rows(W.type, K, W.data + static_cast<size_t>(r0) * wb, wb, static_cast<int>(r1 - r0), packed, n_tokens,
                   out + r0, N, scratch->v);
        continue;
      }
      if (amx && r1 - r0 >= 16) {
        const int64_t rows = (r1 - r0) / 16 * 16;
        const uint8_t* w = W.data + static_cast<size_t>(r0) * wb;
        if (W.layout != WeightLayout::Rows) {  // AMX reads rows: the chunk's groups unpacked, a copy per chunk beside its product
          thread_local std::vector<uint8_t> rows_buf;
          rows_buf.resize(static_cast<size_t>(rows) * wb);
          for (int64_t r = 0; r < rows; ++r) unpack_row(W, r0 + r, rows_buf.data() + static_cast<size_t>(r) * wb);
          w = rows_buf.data();
        }
        amx_rows_q8(W.type == DType::Q4_0, K, w, wb, rows, act, ab, scales, n_tokens, out + r0, N);
        r0 += rows;
      }
      if (x16 && n_tokens > kTileTokens && x16_unpack_for_prompts(W.type)) {  // unpacked once for kX16Span tokens
        constexpr int64_t kX16Span = 64;  // their activations (K = 2048: 150 KiB) stay in L2
        for (int64_t t = 0; t < n_tokens; t += kX16Span)
          for (int64_t r = r0; r < r1; r += kGroupRowsX16)
            dot_group_x16(W.type, K, W.data + static_cast<size_t>(r) * wb, act + static_cast<size_t>(t) * ab, ab,
                          std::min(kX16Span, n_tokens - t), out + t * N + r, N);
        continue;
      }
      for (int64_t t = 0; t < n_tokens; t += kTileTokens) {
        const int rn = static_cast<int>(std::min<int64_t>(kTileTokens, n_tokens - t));
        if (x16) {  // as for x4
          for (int64_t r = r0; r < r1; r += kGroupRowsX16)
            dot_tile_x16(W.type, K, W.data + static_cast<size_t>(r) * wb, act + static_cast<size_t>(t) * ab, ab, rn,
                         out + t * N + r, N);
          continue;
        }
        if (x8) {  // as for x4
          for (int64_t r = r0; r < r1; r += kGroupRowsX8)
            dot_tile_x8(K, W.data + static_cast<size_t>(r) * wb, act + static_cast<size_t>(t) * ab, ab, rn, out + t * N + r, N);
          continue;
        }
        if (x4) {  // chunks are whole groups: a group starts where its first row would
          for (int64_t r = r0; r < r1; r += kGroupRows)
            dot_tile_x4(W.type, K, W.data + static_cast<size_t>(r) * wb, act + static_cast<size_t>(t) * ab, ab, rn,
                        out + t * N + r, N);
          continue;
        }
        for (int64_t r = r0; r < r1; r += tile_rows) {
          const int rm = static_cast<int>(std::min<int64_t>(tile_rows, r1 - r));
          dot_tile(W.type, K, W.data + static_cast<size_t>(r) * wb, wb, rm, act + static_cast<size_t>(t) * ab, ab, rn,
                   out + t * N + r, N, n_tokens > kMatmulExactRows);
        }
      }
    }
  });
}

// SiLU(gate) * up, one vector exp per 16 values (a scalar exp per value cost a prompt 2-3%).
void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const lanes_f g = load_lanes(gate + i);
    store_lanes(out + i, g / (1.0f + lanes_exp(-g)) * load_lanes(up + i));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

// GELU's tanh form through 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): one vector exp per 16 values
// (a scalar tanh per value cost Gemma-3-270M a third of its prefill).
void geglu(float* out, const float* gate, const float* up, int64_t n) {
  constexpr float k = 2 * 0.7978845608028654f;  // 2 sqrt(2 / pi)
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const lanes_f g = load_lanes(gate + i);
    const lanes_f e = lanes_exp(-k * (g + 0.044715f * g * g * g));
    store_lanes(out + i, g / (1.0f + e) * load_lanes(up + i));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-k * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void embed_tokens(float* x, const Model& m, const int32_t* tokens, int64_t n) {
  const int64_t dim = m.cfg.dim;
  const TensorView& table = cpu_weights(m).embedding;
  for (int64_t t = 0; t < n; ++t) {
    float* row = x + t * dim;
    embedding_row(row, table, tokens[t]);
    if (m.cfg.embed_scale != 1.0f)
      for (int64_t i = 0; i < dim; ++i) row[i] *= m.cfg.embed_scale;
  }
}

void embedding_row(float* out, const TensorView& emb, int64_t token) {
  if (token < 0 || token >= emb.n_rows()) fail("token id " + std::to_string(token) + " is outside the vocabulary");
  thread_local std::vector<uint8_t> scratch;
  dequantize_row(emb.type, row_in_file_layout(emb, token, scratch), out, emb.row_len());
}

}  // namespace slake
