#include "slake/model/synthetic_model.h"
#include "slake/quant/weight_pack.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <map>
#include <thread>

#include "model_internal.h"
#include "slake/error.h"

namespace slake {

namespace {

ModelConfig shape(const char* name, int vocab, int dim, int layers, int heads, int kv_heads, int ffn, int ctx, float theta) {
  ModelConfig c;
  c.arch = "llama";
  c.name = name;
  c.n_vocab = vocab;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.ffn_dim = ffn;
  c.n_ctx_train = ctx;
  c.rope_theta = theta;
  return c;
}

// Runs fn(i) for i in [0, n) on the hardware's threads, each taking every nt-th index.
template <class Fn>
void parallel_indices(int64_t n, Fn&& fn) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < nt; ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += nt) fn(i);
    });
  for (int64_t i = 0; i < n; i += nt) fn(i);
  for (std::thread& th : threads) th.join();
}

// splitmix64: a fast, seedable generator; each block of weights gets its own stream.
uint64_t mix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Blocks of an fp16 scale followed by `payload` random bytes (a multiple of 8): Q8_0 and Q4_0.
void fill_scaled_blocks(uint8_t* dst, int64_t n_blocks, int payload, float scale, uint64_t& s) {
  const uint16_t d = fp32_to_fp16(scale);
  for (int64_t b = 0; b < n_blocks; ++b, dst += 2 + payload) {
    std::memcpy(dst, &d, 2);
    for (int i = 0; i < payload; i += 8) {
      const uint64_t r = mix(s);
      std::memcpy(dst + 2 + i, &r, 8);
    }
  }
}

// Fills `n` elements (a whole number of blocks) of type t with values of standard deviation
// about `sd`, deterministically from `seed`.
void fill_random(uint8_t* dst, DType t, int64_t n, float sd, uint64_t seed) {
  uint64_t s = seed;
  const float u = sd * std::sqrt(3.0f);  // uniform on [-u, u] has standard deviation sd
  auto uniform = [&] { return (static_cast<float>(mix(s) >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f) * u; };
  switch (t) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(dst)[i] = uniform();
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(dst)[i] = fp32_to_fp16(uniform());
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(dst)[i] = fp32_to_bf16(uniform());
      break;
    case DType::Q8_0:  // uniform int8 has sd 127/sqrt(3)
      fill_scaled_blocks(dst, n / 32, 32, u / 127.0f, s);
      break;
    case DType::Q4_0:  // value (q - 8) * d with uniform nibbles: sd about 4.6 d
      fill_scaled_blocks(dst, n / 32, 16, sd / 4.6f, s);
      break;
    default:  // refused by make_synthetic_model before any thread starts
      break;
  }
}

}  // namespace

const std::vector<SyntheticPreset>& synthetic_presets() {
  static const std::vector<SyntheticPreset> presets = [] {
    std::vector<SyntheticPreset> p;
    ModelConfig l31 = shape("llama-3.1-8b", 128256, 4096, 32, 32, 8, 14336, 131072, 500000.0f);
    l31.rope_freq_factors = llama3_rope_factors(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
    p.push_back({"llama-3.1-8b", l31});
    p.push_back({"llama-2-7b", shape("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0f)});
    ModelConfig m = shape("mistral-7b-v0.3", 32768, 4096, 32, 32, 8, 14336, 32768, 1000000.0f);
    m.arch = "mistral";
    p.push_back({"mistral-7b-v0.3", m});
    p.push_back({"tinyllama-1.1b", shape("tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, 2048, 10000.0f)});
    // Qwen2.5 (Q/K/V biases) and Qwen3 (per-head Q/K norms, head_dim 128), from their config.json
    // (the Instruct models' contexts); the small ones tie the output to the embedding table.
    auto qwen = [](const char* name, bool qwen3, int vocab, int dim, int layers, int heads, int kv, int head_dim, int ffn, int ctx,
                   bool tied) {
      ModelConfig c = shape(name, vocab, dim, layers, heads, kv, ffn, ctx, 1000000.0f);
      c.arch = qwen3 ? "qwen3" : "qwen2";
      c.head_dim = head_dim;
      c.rms_eps = 1e-6f;
      c.rope_layout = RopeLayout::Half;
      c.qkv_bias = !qwen3;
      c.qk_norm = qwen3;
      c.tied_output = tied;
      return c;
    };
    p.push_back({"qwen2.5-0.5b", qwen("qwen2.5-0.5b", false, 151936, 896, 24, 14, 2, 64, 4864, 32768, true)});
    p.push_back({"qwen2.5-1.5b", qwen("qwen2.5-1.5b", false, 151936, 1536, 28, 12, 2, 128, 8960, 32768, true)});
    p.push_back({"qwen2.5-7b", qwen("qwen2.5-7b", false, 152064, 3584, 28, 28, 4, 128, 18944, 32768, false)});
    p.push_back({"qwen3-0.6b", qwen("qwen3-0.6b", true, 151936, 1024, 28, 16, 8, 128, 3072, 40960, true)});
    p.push_back({"qwen3-8b", qwen("qwen3-8b", true, 151936, 4096, 36, 32, 8, 128, 12288, 40960, false)});
    // The mixtures (config.json): Qwen3-30B-A3B, 128 experts of 768, 8 per token, renormalised;
    // Mixtral-8x7B, Mistral's layer with 8 experts of 14336, 2 per token (llama.cpp: llama).
    ModelConfig q3moe = qwen("qwen3-30b-a3b", true, 151936, 2048, 48, 32, 4, 128, 768, 40960, false);
    q3moe.arch = "qwen3moe";
    q3moe.n_expert = 128;
    q3moe.n_expert_used = 8;
    p.push_back({"qwen3-30b-a3b", q3moe});
    ModelConfig mixtral = shape("mixtral-8x7b", 32000, 4096, 32, 32, 8, 14336, 32768, 1000000.0f);
    mixtral.n_expert = 8;
    mixtral.n_expert_used = 2;
    p.push_back({"mixtral-8x7b", mixtral});
    // Gemma 3 (text), from their config.json: head_dim 256, five sliding layers of every six with
    // RoPE base 1e4, the global ones 1e6 (4B: with linear scaling 8), tied and scaled embeddings.
    auto gemma = [](const char* name, int dim, int layers, int heads, int kv, int ffn, int ctx, int window, float linear) {
      ModelConfig c = shape(name, 262144, dim, layers, heads, kv, ffn, ctx, 1000000.0f);
      c.arch = "gemma3";
      c.head_dim = 256;
      c.rms_eps = 1e-6f;
      c.rope_layout = RopeLayout::Half;
      c.qk_norm = c.post_norms = c.tied_output = true;
      c.embed_scale = std::sqrt(static_cast<float>(dim));
      c.sliding_window = window;
      c.swa_layers = detail::local_layer_pattern(layers, 6);
      if (linear != 1.0f) c.rope_freq_factors.assign(128, linear);
      return c;
    };
    p.push_back({"gemma-3-270m", gemma("gemma-3-270m", 640, 18, 4, 1, 2048, 32768, 512, 1.0f)});
    p.push_back({"gemma-3-1b", gemma("gemma-3-1b", 1152, 26, 4, 1, 6912, 32768, 512, 1.0f)});
    p.push_back({"gemma-3-4b", gemma("gemma-3-4b", 2560, 34, 8, 4, 10240, 131072, 1024, 8.0f)});
    // Gemma 2 2B (config.json of google/gemma-2-2b): no Q/K norms, every other layer sliding
    // within 4096 at the one RoPE base, attention and output logits soft-capped at 50 and 30.
    ModelConfig gemma2 = gemma("gemma-2-2b", 2304, 26, 8, 4, 9216, 8192, 4096, 1.0f);
    gemma2.arch = "gemma2";
    gemma2.n_vocab = 256000;
    gemma2.rope_theta = gemma2.rope_theta_swa = 10000.0f;
    gemma2.qk_norm = false;
    gemma2.swa_layers = detail::local_layer_pattern(26, 2);
    gemma2.attn_softcap = 50.0f;
    gemma2.final_softcap = 30.0f;
    p.push_back({"gemma-2-2b", gemma2});
    // Phi-3-mini-4k (config.json): Llama's layer shape with 32 MHA heads and rotate-half RoPE (the
    // synthetic weights are made split, as the loader splits Phi-3's fused tensors).
    ModelConfig phi3 = shape("phi-3-mini", 32064, 3072, 32, 32, 32, 8192, 4096, 10000.0f);
    phi3.arch = "phi3";
    phi3.rope_layout = RopeLayout::Half;
    p.push_back({"phi-3-mini", phi3});
    p.push_back({"tiny", shape("tiny", 1024, 256, 4, 8, 4, 704, 131072, 10000.0f)});  // long context: for cache-bound runs
    return p;
  }();
  return presets;
}

std::unique_ptr<Model> make_synthetic_model(const std::string& preset, DType type, uint64_t seed) {
  const SyntheticPreset* found = nullptr;
  std::string names;
  for (const SyntheticPreset& p : synthetic_presets()) {
    if (p.name == preset) found = &p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  if (!found) fail("unknown synthetic model '" + preset + "' (" + names + ")");
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16 && type != DType::Q8_0 && type != DType::Q4_0)
    fail(std::string("synthetic weights of type ") + dtype_name(type) + " are not supported (F32, F16, BF16, Q8_0, Q4_0)");
  auto m = std::make_unique<Model>();
  m->cfg = found->cfg;
  m->path = "synthetic:" + preset;
  m->format = "synthetic";
  const ModelConfig& c = m->cfg;
  detail::validate_config(c, m->path);

  // Every tensor's shape and type, then one buffer holding them all.
  struct Spec {
    std::vector<int64_t> ne;
    DType type;
    float sd;
  };
  std::map<std::string, Spec> specs;
  const int64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ff = c.ffn_dim, V = c.n_vocab;
  const float s_dim = 1.0f / std::sqrt(static_cast<float>(dim)), s_q = 1.0f / std::sqrt(static_cast<float>(q)),
              s_ff = 1.0f / std::sqrt(static_cast<float>(ff));
  specs["tok_embd"] = {{dim, V}, type, 1.0f};
  specs["output_norm"] = {{dim}, DType::F32, 0.0f};
  if (!c.tied_output) specs["output"] = {{dim, V}, type, s_dim};
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    specs[p + "attn_norm"] = {{dim}, DType::F32, 0.0f};
    specs[p + "ffn_norm"] = {{dim}, DType::F32, 0.0f};
    specs[p + "wq"] = {{dim, q}, type, s_dim};
    specs[p + "wk"] = {{dim, kv}, type, s_dim};
    specs[p + "wv"] = {{dim, kv}, type, s_dim};
    specs[p + "wo"] = {{q, dim}, type, s_q};
    if (c.n_expert > 0) {
      specs[p + "router"] = {{dim, c.n_expert}, type, s_dim};
      for (int e = 0; e < c.n_expert; ++e) {
        const std::string x = "." + std::to_string(e);
        specs[p + "exp_gate" + x] = {{dim, ff}, type, s_dim};
        specs[p + "exp_up" + x] = {{dim, ff}, type, s_dim};
        specs[p + "exp_down" + x] = {{ff, dim}, type, s_ff};
      }
    } else {
      specs[p + "w_gate"] = {{dim, ff}, type, s_dim};
      specs[p + "w_up"] = {{dim, ff}, type, s_dim};
      specs[p + "w_down"] = {{ff, dim}, type, s_ff};
    }
    if (c.qkv_bias) {
      specs[p + "bq"] = {{q}, DType::F32, 0.1f};
      specs[p + "bk"] = {{kv}, DType::F32, 0.1f};
      specs[p + "bv"] = {{kv}, DType::F32, 0.1f};
    }
    if (c.qk_norm) {
      specs[p + "q_norm"] = {{c.head_dim}, DType::F32, 0.0f};
      specs[p + "k_norm"] = {{c.head_dim}, DType::F32, 0.0f};
    }
    if (c.post_norms) {
      specs[p + "attn_post_norm"] = {{dim}, DType::F32, 0.0f};
      specs[p + "ffn_post_norm"] = {{dim}, DType::F32, 0.0f};
    }
  }
  size_t total = 0;
  for (const auto& [name, sp] : specs) {
    int64_t n = 1;
    for (int64_t e : sp.ne) n *= e;
    if (n % dtype_info(sp.type).block_elems != 0) fail("synthetic " + name + ": size is not a whole number of blocks");
    total += row_bytes(sp.type, n);
  }
  std::shared_ptr<uint8_t> buf;
  try {
    buf = std::shared_ptr<uint8_t>(new uint8_t[total], std::default_delete<uint8_t[]>());
  } catch (const std::bad_alloc&) {
    fail("cannot allocate " + std::to_string(total >> 20) + " MiB for synthetic weights of " + preset);
  }
  std::map<std::string, TensorView> views;
  size_t off = 0;
  for (const auto& [name, sp] : specs) {
    TensorView v;
    v.name = name;
    v.type = sp.type;
    v.ne = sp.ne;
    v.data = buf.get() + off;
    v.nbytes = row_bytes(sp.type, v.n_elements());
    views[name] = v;
    off += v.nbytes;
  }
  // Fill in parallel, in blocks of rows that each get their own seed: the result does not depend
  // on the thread count.
  uint64_t tensor_index = 0;
  for (auto& [name, view] : views) {
    const TensorView& v = view;  // a plain reference: lambdas cannot capture structured bindings in C++17
    uint8_t* data = const_cast<uint8_t*>(v.data);
    const float sd = specs[name].sd;
    if (sd == 0.0f) {  // norm weights: ones
      for (int64_t i = 0; i < v.n_elements(); ++i) reinterpret_cast<float*>(data)[i] = 1.0f;
      continue;
    }
    const int64_t rows = v.n_rows(), per = 64;
    const uint64_t base = seed * 0x100000001B3ull + (++tensor_index << 32);
    parallel_indices((rows + per - 1) / per, [&](int64_t i) {
      const int64_t r0 = i * per, nr = std::min(per, rows - r0);
      fill_random(data + static_cast<size_t>(r0) * row_bytes(v.type, v.row_len()), v.type, nr * v.row_len(), sd,
                  base + static_cast<uint64_t>(i));
    });
  }
  // The matrices the CPU path would repack (weight_pack.h) are generated in that layout, so the
  // weights are in memory once; every other reader goes through row_in_file_layout.
  for (auto& [name, v] : views)
    if (name != "tok_embd" && v.ne.size() == 2) repack_in_place(v);
  detail::TensorNames names_fmt{"tok_embd",      "output_norm",    "output",         "blk.{}.attn_norm", "blk.{}.wq",
                                "blk.{}.wk",     "blk.{}.wv",      "blk.{}.wo",      "blk.{}.ffn_norm",  "blk.{}.w_gate",
                                "blk.{}.w_up",   "blk.{}.w_down",  "blk.{}.bq",      "blk.{}.bk",        "blk.{}.bv",
                                "blk.{}.q_norm", "blk.{}.k_norm", "blk.{}.attn_post_norm", "blk.{}.ffn_post_norm"};
  names_fmt.router = "blk.{}.router";
  names_fmt.exp_gate = "blk.{}.exp_gate.{e}";
  names_fmt.exp_up = "blk.{}.exp_up.{e}";
  names_fmt.exp_down = "blk.{}.exp_down.{e}";
  detail::bind_weights(
      *m, [&](const std::string& n) -> const TensorView* { auto it = views.find(n); return it == views.end() ? nullptr : &it->second; },
      names_fmt, m->path);
  m->storage = buf;
  return m;
}

}  // namespace slake
