#include "cuda/device_weights.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "cuda/device_plan.h"
#include "device_memory.h"
#include "slake/error.h"
#include "slake/quant/dtype.h"
#include "slake/quant/weight_pack.h"

namespace slake::gpu {

namespace {
// Dequantises `t` and writes it to `dst` on the device, as bf16 (matrix) or fp32, in slices.
void upload_tensor(void* dst, const TensorView& t, bool matrix) {
  const int64_t rows = t.n_rows(), len = t.row_len();
  const int64_t slice = std::max<int64_t>(1, (int64_t{16} << 20) / std::max<int64_t>(1, len));
  std::vector<float> f(static_cast<size_t>(std::min(rows, slice) * len));
  std::vector<uint16_t> h(matrix ? f.size() : 0);
  std::vector<uint8_t> raw;
  for (int64_t r0 = 0; r0 < rows; r0 += slice) {
    const int64_t nr = std::min(slice, rows - r0);
    for (int64_t r = 0; r < nr; ++r) dequantize_row(t.type, row_in_file_layout(t, r0 + r, raw), f.data() + r * len, len);
    const size_t n = static_cast<size_t>(nr * len);
    if (matrix) {
      for (size_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(f[i]);
      copy_to_device(static_cast<uint16_t*>(dst) + r0 * len, h.data(), n * sizeof(uint16_t));
    } else {
      copy_to_device(static_cast<float*>(dst) + r0 * len, f.data(), n * sizeof(float));
    }
  }
}
}  // namespace

void for_each_device_weight(const Model& m,
                            const std::function<void(const std::string&, const TensorView&, bool, size_t)>& f) {
  const ModelConfig& c = m.cfg;
  auto one = [&](const std::string& name, const TensorView& t, bool matrix) { f(name, t, matrix, device_weight_bytes(t, matrix)); };
  one("tok_embd", m.tok_embd, true);
  one("output_norm", m.output_norm, false);
  if (!c.tied_output) one("output", m.output, true);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers[static_cast<size_t>(l)];
    const std::string p = "layer" + std::to_string(l) + ".";
    one(p + "attn_norm", w.attn_norm, false);
    one(p + "wq", w.wq, true);
    one(p + "wk", w.wk, true);
    one(p + "wv", w.wv, true);
    one(p + "wo", w.wo, true);
    one(p + "ffn_norm", w.ffn_norm, false);
    if (c.n_expert > 0) {
      one(p + "router", w.router, true);
      for (int e = 0; e < c.n_expert; ++e) {
        const std::string x = "." + std::to_string(e);
        one(p + "exp_gate" + x, w.exp_gate[static_cast<size_t>(e)], true);
        one(p + "exp_up" + x, w.exp_up[static_cast<size_t>(e)], true);
        one(p + "exp_down" + x, w.exp_down[static_cast<size_t>(e)], true);
      }
      if (c.shared_expert_ffn_dim > 0) {
        one(p + "shexp_gate", w.shexp_gate, true);
        one(p + "shexp_up", w.shexp_up, true);
        one(p + "shexp_down", w.shexp_down, true);
        one(p + "shexp_router", w.shexp_router, true);
      }
    } else {
      one(p + "w_gate", w.w_gate, true);
      one(p + "w_up", w.w_up, true);
      one(p + "w_down", w.w_down, true);
    }
    if (c.qkv_bias) {
      one(p + "bq", w.bq, false);
      one(p + "bk", w.bk, false);
      one(p + "bv", w.bv, false);
    }
    if (c.qk_norm) {
      one(p + "q_norm", w.q_norm, false);
      one(p + "k_norm", w.k_norm, false);
    }
    if (c.post_norms) {
      one(p + "attn_post_norm", w.attn_post_norm, false);
      one(p + "ffn_post_norm", w.ffn_post_norm, false);
    }
  }
}

WeightsOnDevice upload_weights(const Model& m, const std::function<void*(const std::string&)>& where) {
  std::map<std::string, const void*> at;
  for_each_device_weight(m, [&](const std::string& name, const TensorView& t, bool matrix, size_t) {
    void* d = where(name);
    upload_tensor(d, t, matrix);
    at[name] = d;
  });
  const ModelConfig& c = m.cfg;
  auto matrix = [&](const std::string& name, const TensorView& t) {
    return DeviceMatrix{static_cast<const uint16_t*>(at.at(name)), static_cast<int>(t.n_rows()), static_cast<int>(t.row_len())};
  };
  auto vec = [&](const std::string& name) {
    const auto it = at.find(name);
    return it == at.end() ? nullptr : static_cast<const float*>(it->second);
  };
  WeightsOnDevice w;
  w.tok_embd = matrix("tok_embd", m.tok_embd);
  w.output = c.tied_output ? w.tok_embd : matrix("output", m.output);
  w.output_norm = vec("output_norm");
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& src = m.layers[static_cast<size_t>(l)];
    LayerWeightsOnDevice& L = w.layers[static_cast<size_t>(l)];
    const std::string p = "layer" + std::to_string(l) + ".";
    L.wq = matrix(p + "wq", src.wq);
    L.wk = matrix(p + "wk", src.wk);
    L.wv = matrix(p + "wv", src.wv);
    L.wo = matrix(p + "wo", src.wo);
    if (c.n_expert > 0) {
      L.router = matrix(p + "router", src.router);
      for (int e = 0; e < c.n_expert; ++e) {
        const std::string x = "." + std::to_string(e);
        const size_t i = static_cast<size_t>(e);
        L.exp_gate.push_back(matrix(p + "exp_gate" + x, src.exp_gate[i]));
        L.exp_up.push_back(matrix(p + "exp_up" + x, src.exp_up[i]));
        L.exp_down.push_back(matrix(p + "exp_down" + x, src.exp_down[i]));
      }
      if (c.shared_expert_ffn_dim > 0) {
        L.shexp_gate = matrix(p + "shexp_gate", src.shexp_gate);
        L.shexp_up = matrix(p + "shexp_up", src.shexp_up);
        L.shexp_down = matrix(p + "shexp_down", src.shexp_down);
        L.shexp_router = matrix(p + "shexp_router", src.shexp_router);
      }
    } else {
      L.w_gate = matrix(p + "w_gate", src.w_gate);
      L.w_up = matrix(p + "w_up", src.w_up);
      L.w_down = matrix(p + "w_down", src.w_down);
    }
    L.attn_norm = vec(p + "attn_norm");
    L.ffn_norm = vec(p + "ffn_norm");
    L.bq = vec(p + "bq");
    L.bk = vec(p + "bk");
    L.bv = vec(p + "bv");
    L.q_norm = vec(p + "q_norm");
    L.k_norm = vec(p + "k_norm");
    L.attn_post_norm = vec(p + "attn_post_norm");
    L.ffn_post_norm = vec(p + "ffn_post_norm");
  }
  return w;
}

DeviceWeights::DeviceWeights(const Model& m) {
  std::map<std::string, size_t> offset;
  for_each_device_weight(m, [&](const std::string& name, const TensorView&, bool, size_t bytes) {
    offset[name] = bytes_;
    bytes_ += arena_align(bytes);
  });
  require_device_memory(bytes_, "the model's weights need");
  mem_ = device_alloc(bytes_);
  try {
    views_ = upload_weights(m, [&](const std::string& name) { return static_cast<char*>(mem_) + offset.at(name); });
  } catch (...) {
    device_free(mem_);
    throw;
  }
}

DeviceWeights::~DeviceWeights() { device_free(mem_); }

std::shared_ptr<const DeviceWeights> shared_device_weights(const Model& m) {
  static std::mutex mu;
  static std::map<const Model*, std::weak_ptr<const DeviceWeights>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = cache.begin(); it != cache.end();) it = it->second.expired() ? cache.erase(it) : std::next(it);
  std::shared_ptr<const DeviceWeights> w = cache[&m].lock();
  if (!w) {
    w = std::make_shared<const DeviceWeights>(m);
    cache[&m] = w;
  }
  return w;
}

}  // namespace slake::gpu
