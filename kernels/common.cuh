// Helpers shared by the kernels: sizes, fp16/bf16 loads, warp and block reductions.
#pragma once
#include <math.h>
#include <cstdint>

#include "cuda_compat.h"
#include "device_memory.h"
#include "kernels.h"

namespace slake::gpu {

constexpr uint32_t kFullMask = 0xffffffffu;

inline __host__ __device__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Logit soft-capping (slake::soft_cap, slake/model/softcap.h): cap * tanh(x / cap); cap 0: x.
inline __host__ __device__ float cap_logit(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }
inline __host__ __device__ double cap_logit_d(double x, double cap) { return cap > 0.0 ? cap * tanh(x / cap) : x; }
// Its slope at x (1 without a cap): the Taylor state's expansion of exp(cap_logit(x)) around the
// evicted tokens' mean raw logit (slake::ptaa_finish).
inline __host__ __device__ float cap_slope(float x, float cap) {
  if (cap <= 0.0f) return 1.0f;
  const float t = tanhf(x / cap);
  return 1.0f - t * t;
}
inline __host__ __device__ int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Blocks of a grid-stride elementwise launch over n items: enough to fill the device, no more.
inline unsigned elementwise_blocks(int64_t n, int threads) {
  const int64_t b = ceil_div64(n, threads);
  return static_cast<unsigned>(b < 4096 ? b : 4096);
}

// IEEE binary16 bits to float (exact; subnormals, infinities and NaN included).
__device__ __forceinline__ float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  const uint32_t bits = exp == 0x1f ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
  return __uint_as_float(bits);
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

template <ElemType T>
__device__ __forceinline__ float load_elem(const void* base, int64_t i);
template <>
__device__ __forceinline__ float load_elem<ElemType::F32>(const void* base, int64_t i) {
  return static_cast<const float*>(base)[i];
}
template <>
__device__ __forceinline__ float load_elem<ElemType::F16>(const void* base, int64_t i) {
  return f16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
}
template <>
__device__ __forceinline__ float load_elem<ElemType::BF16>(const void* base, int64_t i) {
  return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
}

// Value i of a stored KV row of type t (KvLayerView): exact for F32, F16 and BF16, d * q for Q8_0
// (ggml's dequantize_row_q8_0, as slake::kv_load_rows). The switch is uniform across a launch.
__device__ __forceinline__ float kv_elem(ElemType t, const uint8_t* row, int i) {
  switch (t) {
    case ElemType::F16: return f16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
    case ElemType::BF16: return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
    case ElemType::Q8_0: {
      const uint8_t* b = row + (i / 32) * 34;  // block: f16 scale (little-endian), then 32 int8
      const uint16_t s = static_cast<uint16_t>(b[0] | (b[1] << 8));
      return static_cast<float>(static_cast<int8_t>(b[2 + i % 32])) * f16_bits_to_float(s);
    }
    default: return reinterpret_cast<const float*>(row)[i];
  }
}

// float to IEEE binary16 bits, round to nearest even (slake::fp32_to_fp16, bit for bit).
__device__ __forceinline__ uint16_t float_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, infinity
  if (a >= 0x477ff000u) return sign | 0x7c00u;                                // overflow
  if (a < 0x38800000u) {                                                      // subnormal or zero
    if (a < 0x33000000u) return sign;
    const uint32_t shift = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (h & 1u))) ++h;
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = (a - 0x38000000u) >> 13;
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}
// float to bf16 bits, round to nearest even, NaN kept quiet (slake::fp32_to_bf16).
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// `scratch` holds 32 floats of shared memory; the call has a barrier before and after its use.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Exclusive prefix sum of v over the block's threads in thread order; *total gets the block's sum.
// blockDim.x a multiple of 32, at most 1024; `scratch` holds 33 ints of shared memory.
__device__ __forceinline__ int block_exclusive_scan(int v, int* scratch, int* total) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  int inc = v;  // inclusive scan inside the warp
  for (int o = 1; o < 32; o *= 2) {
    const int up = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += up;
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 31) scratch[warp] = inc;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < n_warps; ++w) {
      const int t = scratch[w];
      scratch[w] = run;
      run += t;
    }
    scratch[32] = run;
  }
  __syncthreads();
  *total = scratch[32];
  return scratch[warp] + inc - v;
}

}  // namespace slake::gpu

// After a launch: a rejected configuration becomes an Error naming the kernel.
#define SLAKE_CHECK_LAUNCH(name) ::slake::gpu::check_launch(name)
