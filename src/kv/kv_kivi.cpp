#include "slake/kv/kv_kivi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "slake/quant/dtype.h"
#include "slake/error.h"

namespace slake {

namespace {

// The f16 scale and minimum of values in [lo, hi] at `bits` bits, and the codes of values against
// them: q = round((x - z) / s) clamped to [0, 2^b - 1], from the stored (f16) s and z, so that
// z + s q is what is read back.
struct Grid {
  float s = 0.0f, z = 0.0f, inv = 0.0f;
  int top = 0;
  uint16_t s16 = 0, z16 = 0;
  Grid(float lo, float hi, int bits) : top((1 << bits) - 1) {
    s16 = fp32_to_fp16((hi - lo) / static_cast<float>(top));
    z16 = fp32_to_fp16(lo);
    s = fp16_to_fp32(s16);
    z = fp16_to_fp32(z16);
    inv = s > 0.0f ? 1.0f / s : 0.0f;
  }
  int code(float x) const { return std::clamp(static_cast<int>(std::nearbyint((x - z) * inv)), 0, top); }
};

inline void put_code(uint8_t* codes, int i, int bits, int q) {
  const int per = 8 / bits;
  codes[i / per] = static_cast<uint8_t>(codes[i / per] | (q << ((i % per) * bits)));
}
inline int get_code(const uint8_t* codes, int i, int bits) {
  const int per = 8 / bits;
  return (codes[i / per] >> ((i % per) * bits)) & ((1 << bits) - 1);
}

}  // namespace

KiviRows::KiviRows(bool per_channel, int bits, int head_dim) : d_(head_dim), bits_(bits), per_channel_(per_channel) {
  if (bits != 2 && bits != 4) fail("internal: KIVI stores 2 or 4 bits a value, not " + std::to_string(bits));
  if (head_dim < kGroup || head_dim % kGroup != 0)
    fail("internal: KIVI rows of " + std::to_string(head_dim) + " values (a multiple of 32 is needed)");
  const size_t codes = static_cast<size_t>(head_dim) * bits / 8;
  row_ = per_channel ? sizeof(uint32_t) + codes : static_cast<size_t>(head_dim / kGroup) * (2 * sizeof(uint16_t)) + codes;
}

int KiviRows::groups_in_use() const {
  return static_cast<int>(group_rows_.size()) - static_cast<int>(free_groups_.size());
}

void KiviRows::append(const float* x) {
  const size_t at = static_cast<size_t>(nr_) * d_;
  residual_.resize(at + d_);
  for (int i = 0; i < d_; ++i) residual_[at + i] = fp32_to_fp16(x[i]);
  ++nr_;
}

void KiviRows::load(int j0, int rows, float* dst) const {
  if (j0 < 0 || rows < 0 || j0 + rows > n()) fail("internal: KIVI rows " + std::to_string(j0) + "+" + std::to_string(rows) + " of " + std::to_string(n()));
  // A key group's scales and minima as floats, converted once for its consecutive rows.
  thread_local std::vector<float> sz;
  int64_t converted = -1;
  for (int j = j0; j < j0 + rows; ++j, dst += d_) {
    if (j >= nq_) {
      dequantize_row(DType::F16, &residual_[static_cast<size_t>(j - nq_) * d_], dst, d_);
      continue;
    }
    const uint8_t* r = &rows_[static_cast<size_t>(j) * row_];
    if (per_channel_) {
      uint32_t g;
      std::memcpy(&g, r, sizeof g);
      if (g != converted) {
        sz.resize(2 * static_cast<size_t>(d_));
        dequantize_row(DType::F16, &params_[static_cast<size_t>(g) * 2 * d_], sz.data(), 2 * d_);
        converted = g;
      }
      const float* s = sz.data();
      const float* z = s + d_;
      const uint8_t* codes = r + sizeof g;
      for (int i = 0; i < d_; ++i) dst[i] = z[i] + s[i] * static_cast<float>(get_code(codes, i, bits_));
    } else {
      const size_t block = 2 * sizeof(uint16_t) + kGroup * bits_ / 8;
      for (int b = 0; b < d_ / kGroup; ++b) {
        const uint8_t* blk = r + b * block;
        uint16_t s16, z16;
        std::memcpy(&s16, blk, 2);
        std::memcpy(&z16, blk + 2, 2);
        const float s = fp16_to_fp32(s16), z = fp16_to_fp32(z16);
        for (int i = 0; i < kGroup; ++i) dst[b * kGroup + i] = z + s * static_cast<float>(get_code(blk + 4, i, bits_));
      }
    }
  }
}

int KiviRows::new_group() {
  if (!free_groups_.empty()) {
    const int g = free_groups_.back();
    free_groups_.pop_back();
    return g;
  }
  group_rows_.push_back(0);
  params_.resize(group_rows_.size() * 2 * d_);
  return static_cast<int>(group_rows_.size()) - 1;
}

void KiviRows::quantise_keys(const float* x, int rows) {
  const int g = new_group();
  group_rows_[static_cast<size_t>(g)] = rows;
  uint16_t* s = &params_[static_cast<size_t>(g) * 2 * d_];
  uint16_t* z = s + d_;
  const size_t first = static_cast<size_t>(nq_) * row_;
  rows_.resize(first + static_cast<size_t>(rows) * row_);
  std::fill(rows_.begin() + static_cast<std::ptrdiff_t>(first), rows_.end(), uint8_t{0});
  const uint32_t g32 = static_cast<uint32_t>(g);
  for (int r = 0; r < rows; ++r) std::memcpy(&rows_[first + r * row_], &g32, sizeof g32);
  for (int i = 0; i < d_; ++i) {
    float lo = x[i], hi = x[i];
    for (int r = 1; r < rows; ++r) lo = std::min(lo, x[static_cast<size_t>(r) * d_ + i]), hi = std::max(hi, x[static_cast<size_t>(r) * d_ + i]);
    const Grid grid(lo, hi, bits_);
    s[i] = grid.s16;
    z[i] = grid.z16;
    for (int r = 0; r < rows; ++r)
      put_code(&rows_[first + r * row_ + sizeof g32], i, bits_, grid.code(x[static_cast<size_t>(r) * d_ + i]));
  }
  nq_ += rows;
}

void KiviRows::quantise_value(const float* x, uint8_t* dst) const {
  const size_t block = 2 * sizeof(uint16_t) + kGroup * bits_ / 8;
  std::memset(dst, 0, row_);
  for (int b = 0; b < d_ / kGroup; ++b, x += kGroup) {
    const auto [lo, hi] = std::minmax_element(x, x + kGroup);
    const Grid grid(*lo, *hi, bits_);
    uint8_t* blk = dst + b * block;
    std::memcpy(blk, &grid.s16, 2);
    std::memcpy(blk + 2, &grid.z16, 2);
    for (int i = 0; i < kGroup; ++i) put_code(blk + 4, i, bits_, grid.code(x[i]));
  }
}

void KiviRows::settle() {
  if (nr_ >= kGroup) {
    const int take = nr_ / kGroup * kGroup;
    // A prompt's rows settle at once: room for exactly them, where growing group by group would
    // leave up to twice the codes' bytes allocated. A decode step's one group grows as a vector does.
    if (take > kGroup) {
      rows_.reserve(static_cast<size_t>(nq_ + take) * row_);
      if (per_channel_) params_.reserve((group_rows_.size() + static_cast<size_t>(take / kGroup)) * 2 * d_);
    }
    std::vector<float> x(static_cast<size_t>(kGroup) * d_);
    for (int g0 = 0; g0 < take; g0 += kGroup) {
      for (size_t i = 0; i < x.size(); ++i) x[i] = fp16_to_fp32(residual_[static_cast<size_t>(g0) * d_ + i]);
      if (per_channel_) {
        quantise_keys(x.data(), kGroup);
      } else {
        rows_.resize(static_cast<size_t>(nq_ + kGroup) * row_);
        for (int r = 0; r < kGroup; ++r) quantise_value(&x[static_cast<size_t>(r) * d_], &rows_[static_cast<size_t>(nq_ + r) * row_]);
        nq_ += kGroup;
      }
    }
    residual_.erase(residual_.begin(), residual_.begin() + static_cast<std::ptrdiff_t>(take) * d_);
    nr_ -= take;
    // Until this settle the residual held every prompt token of the layer in f16; decode keeps
    // fewer than a group there, so the rest of that allocation is given back.
    if (residual_.capacity() > static_cast<size_t>(2 * kGroup) * d_) residual_.shrink_to_fit();
  }
  if (per_channel_ && groups_in_use() > 2 * ((nq_ + kGroup - 1) / kGroup)) regroup();
}

void KiviRows::regroup() {
  std::vector<float> x(static_cast<size_t>(nq_) * d_);
  load(0, nq_, x.data());
  const int n = nq_;
  rows_.clear();
  params_.clear();
  group_rows_.clear();
  free_groups_.clear();
  nq_ = 0;
  for (int r0 = 0; r0 < n; r0 += kGroup) quantise_keys(&x[static_cast<size_t>(r0) * d_], std::min(kGroup, n - r0));
}

void KiviRows::compact(const std::vector<char>& keep) {
  if (static_cast<int>(keep.size()) != n()) fail("internal: KIVI compaction of " + std::to_string(n()) + " rows with " + std::to_string(keep.size()) + " flags");
  int w = 0;
  for (int j = 0; j < nq_; ++j) {
    uint8_t* r = &rows_[static_cast<size_t>(j) * row_];
    if (!keep[static_cast<size_t>(j)]) {
      if (per_channel_) {
        uint32_t g;
        std::memcpy(&g, r, sizeof g);
        if (--group_rows_[g] == 0) free_groups_.push_back(static_cast<int32_t>(g));
      }
      continue;
    }
    if (w != j) std::memmove(&rows_[static_cast<size_t>(w) * row_], r, row_);
    ++w;
  }
  int wr = 0;
  for (int j = 0; j < nr_; ++j) {
    if (!keep[static_cast<size_t>(nq_ + j)]) continue;
    if (wr != j) std::memmove(&residual_[static_cast<size_t>(wr) * d_], &residual_[static_cast<size_t>(j) * d_], d_ * sizeof(uint16_t));
    ++wr;
  }
  nq_ = w;
  nr_ = wr;
  rows_.resize(static_cast<size_t>(nq_) * row_);
  residual_.resize(static_cast<size_t>(nr_) * d_);
}

void KiviRows::clear() {
  rows_.clear();
  residual_.clear();
  params_.clear();
  group_rows_.clear();
  free_groups_.clear();
  nq_ = nr_ = 0;
}

size_t KiviRows::bytes() const {
  return static_cast<size_t>(nq_) * row_ + static_cast<size_t>(nr_) * d_ * sizeof(uint16_t) +
         static_cast<size_t>(groups_in_use()) * 2 * d_ * sizeof(uint16_t);
}

size_t KiviRows::bytes_allocated() const {
  return rows_.capacity() + (residual_.capacity() + params_.capacity()) * sizeof(uint16_t) +
         (group_rows_.capacity() + free_groups_.capacity()) * sizeof(int32_t);
}

size_t KiviRows::bound_bytes(bool per_channel, int head_dim, int64_t n) {
  const size_t f16_row = static_cast<size_t>(head_dim) * sizeof(uint16_t);
  return static_cast<size_t>(n) * f16_row + (per_channel ? 2 * 2 * f16_row : 0);
}

}  // namespace slake
