// KIVI storage of one KV head's keys or values, for -ctk/-ctv kivi2 and kivi4 (Liu et al., "KIVI:
// A Tuning-Free Asymmetric 2bit Quantization for KV Cache", 2024), b = 2 or 4 bits a value:
//   keys   per channel, in groups of kGroup = 32 tokens: for each channel c a group stores an f16
//          scale s_c = (max_c - min_c) / (2^b - 1) and minimum z_c over its tokens, and each token
//          one b-bit code q per channel: k ~ z_c + s_c q. (Keys have outlier channels; a channel's
//          range over 32 tokens is tight where a token's range over its channels is not.)
//   values per token, in blocks of 32 channels, each block an f16 scale and minimum and b-bit codes.
//   recent tokens stay f16 (the "residual") until settle() quantises them in whole groups of 32,
//          oldest first; fewer than 32 remain f16. KvCache calls settle() after each layer's
//          eviction, so the tokens of a prompt are grouped after the prefill evicted what it evicts:
//          groups are formed of survivors, consecutive, and full.
// Eviction of a quantised token removes its codes; the others keep theirs and their group's
// scales and minima, which still describe any subset of the group exactly (no re-quantisation,
// so eviction adds no error). Decode-time eviction thins groups out; when more than twice the
// groups that the quantised tokens need are in use, settle() dequantises them and quantises them
// again in full groups (each such pass can add up to half a step of the new group to a value),
// which bounds the scales' and minima's bytes: at most 2 ceil(n / 32) groups.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace slake {

class KiviRows {
 public:
  static constexpr int kGroup = 32;  // tokens per key group, channels per value block

  KiviRows() = default;  // inactive: the head's tensor is not kivi-typed
  // per_channel: keys (grouped over tokens); else values (per token). bits: 2 or 4; head_dim a
  // multiple of 32.
  KiviRows(bool per_channel, int bits, int head_dim);

  bool active() const { return d_ > 0; }
  int n() const { return nq_ + nr_; }
  int quantised() const { return nq_; }
  int residual() const { return nr_; }
  // Key groups holding at least one token (0 for values).
  int groups_in_use() const;

  // Appends one row of head_dim values to the residual (rounded to f16).
  void append(const float* x);
  // Rows [j0, j0 + rows) as floats (rows * head_dim): the quantised rows dequantised, then the
  // residual's f16 values.
  void load(int j0, int rows, float* dst) const;
  // Keeps the rows flagged in keep (one flag per row, n() of them), in order.
  void compact(const std::vector<char>& keep);
  // Quantises the residual's oldest rows in whole groups of kGroup, then re-groups the quantised
  // rows if eviction has left more than twice the groups they need.
  void settle();
  void clear();

  // Stored bytes: quantised rows, the scales and minima of the groups in use, residual rows.
  size_t bytes() const;
  // Bytes the vectors behind it hold allocated (bytes() and the room they have grown beyond it).
  size_t bytes_allocated() const;
  // Bytes of one quantised row (the codes, and for keys the index of its group).
  size_t quantised_row_bytes() const { return row_; }
  // A bound on bytes() for a head of n rows: every row at most an f16 row once the groups' scales
  // and minima are shared out (kivi4 keys: 4 + d/2 + 2 * 4d/32 bytes a row <= 2d), plus two
  // groups' worth for a head with fewer rows than a group (keys).
  static size_t bound_bytes(bool per_channel, int head_dim, int64_t n);
  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(d_, bits_, per_channel_, row_, rows_, residual_, params_, group_rows_, free_groups_, nq_, nr_);
  }

 private:
  void quantise_keys(const float* x, int rows);     // one new group of `rows` tokens
  void quantise_value(const float* x, uint8_t* dst) const;
  void regroup();
  int new_group();

  int d_ = 0, bits_ = 0;
  bool per_channel_ = false;
  size_t row_ = 0;                    // bytes of a quantised row
  std::vector<uint8_t> rows_;         // [nq][row_]: keys: uint32 group, codes; values: blocks
  std::vector<uint16_t> residual_;    // [nr][d] f16
  std::vector<uint16_t> params_;      // keys: [groups][2][d] f16: scales, then minima
  std::vector<int32_t> group_rows_;   // keys: rows of each group held; 0 for a free group
  std::vector<int32_t> free_groups_;  // keys
  int nq_ = 0, nr_ = 0;
};

}  // namespace slake
