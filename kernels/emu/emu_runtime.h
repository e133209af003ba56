// The CUDA builtins the kernels use, for the host compiler, on top of the block executor.
// Included by cuda_compat.h when not compiling with nvcc; never include it directly.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "emu/block_executor.h"

#define __global__ inline
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __align__(n) alignas(n)

constexpr int warpSize = ::slake::emu::kWarpSize;

#define SLAKE_SHARED(T, name, n) \
  T* name = static_cast<T*>(::slake::emu::shared_alloc(sizeof(T) * static_cast<size_t>(n), alignof(T)))
#define SLAKE_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::slake::emu::dynamic_shared())

namespace slake::emu {

template <typename F>
struct Launch {
  dim3 grid, block;
  size_t smem;
  F kernel;
  template <typename... Args>
  void operator()(Args... args) const {  // by value, like kernel parameters
    run_grid(grid, block, smem, [&] { kernel(args...); });
  }
};
template <typename F>
Launch<F> make_launch(dim3 grid, dim3 block, size_t smem, F f) {
  return Launch<F>{grid, block, smem, f};
}

template <typename T>
T shuffle(uint32_t mask, T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, src);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace slake::emu

// The stream is ignored: launches run to completion, in order.
#define SLAKE_LAUNCH(grid, block, smem, stream, ...)                                           \
  ((void)(stream), ::slake::emu::make_launch((grid), (block), (smem), [&](auto&&... slake_args_) { \
     __VA_ARGS__(slake_args_...);                                                              \
   }))

inline void __syncthreads() { ::slake::emu::block_barrier(); }
inline void __syncwarp(uint32_t mask = 0xffffffffu) { ::slake::emu::warp_barrier(mask); }

// Segment of `width` lanes that lane belongs to: [base, base + width).
template <typename T>
T __shfl_sync(uint32_t mask, T v, int src_lane, int width = warpSize) {
  const int lane = ::slake::emu::lane_id();
  const int base = lane / width * width;
  return ::slake::emu::shuffle(mask, v, base + (src_lane % width));
}
template <typename T>
T __shfl_xor_sync(uint32_t mask, T v, int lane_mask, int width = warpSize) {
  const int lane = ::slake::emu::lane_id();
  const int base = lane / width * width;
  const int src = lane ^ lane_mask;
  return ::slake::emu::shuffle(mask, v, src >= base + width ? lane : src);
}
template <typename T>
T __shfl_down_sync(uint32_t mask, T v, unsigned int delta, int width = warpSize) {
  const int lane = ::slake::emu::lane_id();
  const int in_seg = lane % width;
  return ::slake::emu::shuffle(mask, v, in_seg + static_cast<int>(delta) >= width ? lane : lane + static_cast<int>(delta));
}
template <typename T>
T __shfl_up_sync(uint32_t mask, T v, unsigned int delta, int width = warpSize) {
  const int lane = ::slake::emu::lane_id();
  const int in_seg = lane % width;
  return ::slake::emu::shuffle(mask, v, in_seg < static_cast<int>(delta) ? lane : lane - static_cast<int>(delta));
}

// Fibers of one OS thread never run at the same time: atomics are plain read-modify-writes.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, 4);
  return u;
}
using std::max;
using std::min;
// expf, logf, sqrtf, fmaxf, fminf, sin, cos and friends: the C library's (math.h, through cmath).
#include <math.h>
