// Sixteen fp32 lanes as a GCC/Clang vector type, and the few operations the attention kernels need
// on them. The compiler maps a lane vector to one AVX-512 register, two AVX2 registers or four
// SSE/NEON registers, so one source serves every target; the arithmetic is the same on each.
#pragma once
#include <cstdint>
#include <cstring>

namespace slake {

constexpr int kLanes = 16;
using lanes_f = float __attribute__((vector_size(kLanes * sizeof(float))));
using lanes_i = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline lanes_f splat(float x) { return lanes_f{} + x; }
inline lanes_i splat_i(int32_t x) { return lanes_i{} + x; }
inline lanes_f lanes_max(lanes_f a, lanes_f b) { return a > b ? a : b; }

inline lanes_f load_lanes(const float* p) {
  lanes_f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_lanes(float* p, lanes_f v) { std::memcpy(p, &v, sizeof v); }

// exp(x) per lane within 2 ulp of the correctly rounded result for x in [-87.3, 88.7]; 0 below
// (including -inf), +inf above. Cephes' expf: x = n ln2 + r with |r| <= ln2/2, a degree-6
// polynomial for exp(r), and 2^n built in the exponent bits.
inline lanes_f lanes_exp(lanes_f x) {
  const lanes_f lo = splat(-87.33654f), hi = splat(88.72283f);
  const lanes_f xc = x < lo ? lo : (x > hi ? hi : x);
  const lanes_f shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const lanes_f t = xc * 1.44269504088896341f + shifter;
  const lanes_f n = t - shifter;
  lanes_f r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  lanes_f p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const lanes_f y = p * (r * r) + r + 1.0f;
  const lanes_i e = (__builtin_convertvector(n, lanes_i) + 127) << 23;
  lanes_f two_n;
  std::memcpy(&two_n, &e, sizeof two_n);
  const lanes_f big = splat(__builtin_huge_valf());
  return x < lo ? lanes_f{} : (x > hi ? big : y * two_n);
}

}  // namespace slake
