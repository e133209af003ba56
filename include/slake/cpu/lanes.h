// Sixteen fp32 lanes as a GCC/Clang vector type, and the few operations the attention kernels need
// on them. The compiler maps a lane vector to one AVX-512 register, two AVX2 registers or four
// SSE/NEON registers, so one source serves every target; the arithmetic is the same on each.
//
// Comparisons and selects are the exception: without AVX-512, GCC 12 lowers a comparison or a
// `?:` of 16-lane vectors one lane at a time (a vcomiss and two scalar moves per lane). So every
// comparison, select, maximum and exp here runs on native-width parts (part_f: 16 lanes with
// AVX-512, 8 with AVX, 4 elsewhere), where they stay vector instructions, and the kernels use
// these helpers instead of writing `a > b ? a : b` on whole lane vectors.
#pragma once
#include <cstdint>
#include <cstring>

namespace slake {

constexpr int kLanes = 16;
using lanes_f = float __attribute__((vector_size(kLanes * sizeof(float))));
using lanes_i = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

#if defined(__AVX512F__)
constexpr int kPartLanes = 16;
#elif defined(__AVX__)
constexpr int kPartLanes = 8;
#else
constexpr int kPartLanes = 4;
#endif
constexpr int kParts = kLanes / kPartLanes;
using part_f = float __attribute__((vector_size(kPartLanes * sizeof(float))));
using part_i = int32_t __attribute__((vector_size(kPartLanes * sizeof(int32_t))));

inline lanes_f splat(float x) { return lanes_f{} + x; }
inline lanes_i splat_i(int32_t x) { return lanes_i{} + x; }

inline lanes_f load_lanes(const float* p) {
  lanes_f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_lanes(float* p, lanes_f v) { std::memcpy(p, &v, sizeof v); }

// Part `part` of a lane vector (or of any vector of 16 four-byte lanes), and back.
template <class P, class V>
inline P part_of(const V& v, int part) {
  static_assert(sizeof(V) == kLanes * 4 && sizeof(P) == kPartLanes * 4, "16 lanes of 4 bytes, in parts");
  P x;
  std::memcpy(&x, reinterpret_cast<const char*>(&v) + part * sizeof(P), sizeof x);
  return x;
}
template <class V, class P>
inline void set_part(V& v, int part, P x) {
  std::memcpy(reinterpret_cast<char*>(&v) + part * sizeof(P), &x, sizeof x);
}

// f applied part by part: r's part p is f(a's part p, b's part p).
template <class R, class PR, class P, class V, class F>
inline R by_parts(const V& a, const V& b, F f) {
  R r;
  for (int p = 0; p < kParts; ++p) set_part(r, p, static_cast<PR>(f(part_of<P>(a, p), part_of<P>(b, p))));
  return r;
}

// Lane masks: all ones where the comparison holds, 0 elsewhere (NaN compares false).
inline lanes_i lanes_gt(lanes_f a, lanes_f b) {
  return by_parts<lanes_i, part_i, part_f>(a, b, [](part_f x, part_f y) { return x > y; });
}
inline lanes_i lanes_lt(lanes_f a, lanes_f b) { return lanes_gt(b, a); }
inline lanes_i lanes_eq(lanes_f a, lanes_f b) {
  return by_parts<lanes_i, part_i, part_f>(a, b, [](part_f x, part_f y) { return x == y; });
}
inline lanes_i lanes_gt_i(lanes_i a, lanes_i b) {
  return by_parts<lanes_i, part_i, part_i>(a, b, [](part_i x, part_i y) { return x > y; });
}
inline lanes_i lanes_le_i(lanes_i a, lanes_i b) { return ~lanes_gt_i(a, b); }

// mask ? a : b per lane, with a mask from the comparisons above (bitwise, which GCC keeps vector).
inline lanes_f lanes_select(lanes_i mask, lanes_f a, lanes_f b) {
  lanes_i ai, bi;
  std::memcpy(&ai, &a, sizeof a);
  std::memcpy(&bi, &b, sizeof b);
  const lanes_i r = (mask & ai) | (~mask & bi);
  lanes_f out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

// a > b ? a : b per lane.
inline lanes_f lanes_max(lanes_f a, lanes_f b) {
  return by_parts<lanes_f, part_f, part_f>(a, b, [](part_f x, part_f y) { return x > y ? x : y; });
}

// exp(x) per lane within 2 ulp of the correctly rounded result for x in [-87.3, 88.37]; 0 below
// (including -inf), +inf above: from 88.38, where n reaches 128 and 2^n's exponent bits are
// infinity's, to 88.72 that is +inf where exp(x) is still a float (up to 3.4e38). Cephes' expf:
// x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for exp(r), and 2^n built in the
// exponent bits. On one native-width part.
inline part_f part_exp(part_f x) {
  const part_f lo = part_f{} + -87.33654f, hi = part_f{} + 88.72283f;
  const part_f xc = x < lo ? lo : (x > hi ? hi : x);
  const part_f shifter = part_f{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const part_f t = xc * 1.44269504088896341f + shifter;
  const part_f n = t - shifter;
  part_f r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  part_f p = part_f{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const part_f y = p * (r * r) + r + 1.0f;
  const part_i e = (__builtin_convertvector(n, part_i) + 127) << 23;
  part_f two_n;
  std::memcpy(&two_n, &e, sizeof two_n);
  const part_f big = part_f{} + __builtin_huge_valf();
  return x < lo ? part_f{} : (x > hi ? big : y * two_n);
}

inline lanes_f lanes_exp(lanes_f x) {
  lanes_f r;
  for (int p = 0; p < kParts; ++p) set_part(r, p, part_exp(part_of<part_f>(x, p)));
  return r;
}

// cap * tanh(x / cap) per lane (soft-capping, slake/model/softcap.h), cap > 0, as
// cap - 2 cap / (exp(2 x / cap) + 1): within a few 1e-7 cap of it, and +-cap for large |x|
// (-cap for x = -inf, so masks go on after it).
inline lanes_f lanes_soft_cap(lanes_f x, float cap) {
  const lanes_f e = lanes_exp(x * (2.0f / cap));
  return cap - (2.0f * cap) / (e + 1.0f);
}

}  // namespace slake
