// A layer of a CPU KvCache (and its linear states) copied to the device in the kernels' packed
// layout (kernels.h KvLayerView / LinearStateView): the stored rows byte for byte, whatever their
// row type, so a kernel and the CPU read the same stored values.
#pragma once
#include <algorithm>
#include <vector>

#include "device_memory.h"
#include "kernels.h"
#include "slake/kv/kv_cache.h"

namespace slake::gpu::test {

struct DeviceKvLayer {
  int n_kv_heads, capacity, head_dim;
  ElemType type_k, type_v;  // ElemType's values are slake::DType's
  size_t k_row, v_row;
  DeviceBuffer<uint8_t> k, v;
  DeviceBuffer<int32_t> pos, n_held;
  DeviceBuffer<float> lin_n, ksum, vsum, M;
  int centroids = 0;  // the heads' centroid states (LinearState centroid mode), when they have them
  DeviceBuffer<float> cn, ck, cv;

  DeviceKvLayer(const KvCache& cache, int layer, int capacity_)
      : n_kv_heads(cache.n_kv_heads()),
        capacity(capacity_),
        head_dim(cache.head_dim()),
        type_k(static_cast<ElemType>(kv_dtype(cache.type_k()))),
        type_v(static_cast<ElemType>(kv_dtype(cache.type_v()))),
        k_row(kv_row_bytes(cache.type_k(), cache.head_dim())),
        v_row(kv_row_bytes(cache.type_v(), cache.head_dim())) {
    const int d = head_dim, H = n_kv_heads;
    std::vector<uint8_t> hk(static_cast<size_t>(H) * capacity * k_row), hv(static_cast<size_t>(H) * capacity * v_row);
    std::vector<int32_t> hp(static_cast<size_t>(H) * capacity), hn(static_cast<size_t>(H));
    std::vector<float> ln(static_cast<size_t>(H)), ks(static_cast<size_t>(H) * d), vs(ks.size()), m(static_cast<size_t>(H) * d * d);
    centroids = cache.head(layer, 0).lin.centroids;
    const size_t K = static_cast<size_t>(centroids);
    std::vector<float> hcn(static_cast<size_t>(H) * K), hck(hcn.size() * d), hcv(hck.size());
    for (int g = 0; g < H; ++g) {
      const KvHead& kh = cache.head(layer, g);
      hn[static_cast<size_t>(g)] = kh.n;
      std::copy(kh.k.begin(), kh.k.begin() + static_cast<long>(kh.n * k_row), hk.begin() + static_cast<long>(g * capacity * k_row));
      std::copy(kh.v.begin(), kh.v.begin() + static_cast<long>(kh.n * v_row), hv.begin() + static_cast<long>(g * capacity * v_row));
      std::copy(kh.pos.begin(), kh.pos.begin() + kh.n, hp.begin() + static_cast<long>(g) * capacity);
      ln[static_cast<size_t>(g)] = kh.lin.n;
      if (!kh.lin.M.empty()) {
        std::copy(kh.lin.ksum.begin(), kh.lin.ksum.end(), ks.begin() + static_cast<long>(g) * d);
        std::copy(kh.lin.vsum.begin(), kh.lin.vsum.end(), vs.begin() + static_cast<long>(g) * d);
        std::copy(kh.lin.M.begin(), kh.lin.M.end(), m.begin() + static_cast<long>(g) * d * d);
      }
      if (!kh.lin.cn.empty()) {
        std::copy(kh.lin.cn.begin(), kh.lin.cn.end(), hcn.begin() + static_cast<long>(g * K));
        std::copy(kh.lin.ck.begin(), kh.lin.ck.end(), hck.begin() + static_cast<long>(g * K * d));
        std::copy(kh.lin.cv.begin(), kh.lin.cv.end(), hcv.begin() + static_cast<long>(g * K * d));
      }
    }
    k = DeviceBuffer<uint8_t>(hk), v = DeviceBuffer<uint8_t>(hv);
    pos = DeviceBuffer<int32_t>(hp), n_held = DeviceBuffer<int32_t>(hn);
    lin_n = DeviceBuffer<float>(ln), ksum = DeviceBuffer<float>(ks), vsum = DeviceBuffer<float>(vs), M = DeviceBuffer<float>(m);
    if (K > 0) cn = DeviceBuffer<float>(hcn), ck = DeviceBuffer<float>(hck), cv = DeviceBuffer<float>(hcv);
  }

  KvLayerView view() const {
    return KvLayerView{k.get(), v.get(), pos.get(), n_held.get(), n_kv_heads, capacity, head_dim, type_k, type_v};
  }
  KvLayerMut mut() const { return KvLayerMut{k.get(), v.get(), pos.get(), n_kv_heads, capacity, head_dim, type_k, type_v}; }
  LinearStateView lin() const {
    if (centroids == 0) return LinearStateView{lin_n.get(), ksum.get(), vsum.get(), M.get()};
    LinearStateView v{lin_n.get(), nullptr, nullptr, nullptr};
    v.centroids = centroids, v.cn = cn.get(), v.ck = ck.get(), v.cv = cv.get();
    return v;
  }
};

}  // namespace slake::gpu::test
