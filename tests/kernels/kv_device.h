// A layer of a CPU KvCache (and its linear states) copied to the device in the kernels' packed
// layout (kernels.h KvLayerView / LinearStateView), and back.
#pragma once
#include <algorithm>
#include <vector>

#include "device_memory.h"
#include "kernels.h"
#include "slake/kv_cache.h"

namespace slake::gpu::test {

struct DeviceKvLayer {
  int n_kv_heads, capacity, head_dim;
  DeviceBuffer<float> k, v;
  DeviceBuffer<int32_t> pos, n_held;
  DeviceBuffer<float> lin_n, ksum, vsum, M;

  DeviceKvLayer(const KvCache& cache, int layer, int capacity_)
      : n_kv_heads(cache.n_kv_heads()), capacity(capacity_), head_dim(cache.head_dim()) {
    const int d = head_dim, H = n_kv_heads;
    std::vector<float> hk(static_cast<size_t>(H) * capacity * d), hv(hk.size());
    std::vector<int32_t> hp(static_cast<size_t>(H) * capacity), hn(static_cast<size_t>(H));
    std::vector<float> ln(static_cast<size_t>(H)), ks(static_cast<size_t>(H) * d), vs(ks.size()), m(static_cast<size_t>(H) * d * d);
    for (int g = 0; g < H; ++g) {
      const KvHead& kh = cache.head(layer, g);
      hn[static_cast<size_t>(g)] = kh.n;
      if (kh.n > 0) {  // an f32 cache: its rows in place
        std::copy(kh.key(0, d), kh.key(0, d) + static_cast<long>(kh.n) * d, hk.begin() + static_cast<long>(g) * capacity * d);
        std::copy(kh.value(0, d), kh.value(0, d) + static_cast<long>(kh.n) * d, hv.begin() + static_cast<long>(g) * capacity * d);
      }
      std::copy(kh.pos.begin(), kh.pos.begin() + kh.n, hp.begin() + static_cast<long>(g) * capacity);
      ln[static_cast<size_t>(g)] = kh.lin.n;
      if (!kh.lin.M.empty()) {
        std::copy(kh.lin.ksum.begin(), kh.lin.ksum.end(), ks.begin() + static_cast<long>(g) * d);
        std::copy(kh.lin.vsum.begin(), kh.lin.vsum.end(), vs.begin() + static_cast<long>(g) * d);
        std::copy(kh.lin.M.begin(), kh.lin.M.end(), m.begin() + static_cast<long>(g) * d * d);
      }
    }
    k = DeviceBuffer<float>(hk), v = DeviceBuffer<float>(hv);
    pos = DeviceBuffer<int32_t>(hp), n_held = DeviceBuffer<int32_t>(hn);
    lin_n = DeviceBuffer<float>(ln), ksum = DeviceBuffer<float>(ks), vsum = DeviceBuffer<float>(vs), M = DeviceBuffer<float>(m);
  }

  KvLayerView view() const { return KvLayerView{k.get(), v.get(), pos.get(), n_held.get(), n_kv_heads, capacity, head_dim}; }
  LinearStateView lin() const { return LinearStateView{lin_n.get(), ksum.get(), vsum.get(), M.get()}; }
};

}  // namespace slake::gpu::test
