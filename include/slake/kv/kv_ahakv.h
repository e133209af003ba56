// Accumulated attention as the h2o and ahakv selectors keep it (algorithm.md §2.3, §5.3), and
// AhaKV's three corrections to it (arXiv 2506.03762): a step gain that sharpens the softmax rows of
// long contexts, sums over the most recent r queries only (so every token sums as many rows), and
// a prior from the norms of the value vectors. With all three off the scores are H2O's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace slake {

// Which of AhaKV's parts a selector uses; each can be switched off for the ablation.
struct AhaParts {
  bool gain = true;    // step-gain softmax (step_gain)
  bool recent = true;  // sums over the most recent r queries, not every query
  bool value = true;   // times the value prior (value_prior)
  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(gain, recent, value);
  }

};
bool operator==(const AhaParts& a, const AhaParts& b);
inline bool operator!=(const AhaParts& a, const AhaParts& b) { return !(a == b); }
// "gain+recent+value", any '+'-joined subset in any order, or "none". Throws slake::Error.
AhaParts parse_aha_parts(const std::string& s);
// The canonical spelling: the parts in the order gain, recent, value, or "none".
std::string aha_parts_name(const AhaParts& p);

// The step gain of a query that sees `row_len` tokens (its position + 1) when `budget` tokens are
// kept: its logits q.k / sqrt(d) are multiplied by sqrt(max(2 ln(row_len / budget), 1)), so the
// scale is AhaKV's lambda = sqrt(2 ln(i / k) / d) where that is sharper than the model's own
// 1 / sqrt(d), and the model's own below (algorithm.md §8). 1 without a budget.
double step_gain(int64_t row_len, int64_t budget);

// The value prior of n rows whose squared value norms are v2[0..n) in position order: the norms
// average-pooled over 5 rows (zero padding, divided by 5 at the edges too, as the indicator's
// pool), divided by their maximum; all ones when every norm is 0.
void value_prior(const float* v2, int n, double* out);

// One KV head's accumulated attention per cache row: the sum of the softmax rows of every query
// so far (recent = 0) or of the most recent `recent` queries only, kept in a ring of that many rows
// so the oldest leaves as a new one joins. Rows follow the cache: new rows are appended (as 0 for
// the queries before them), evicted rows leave with keep_rows.
class AttentionSums {
 public:
  explicit AttentionSums(int recent = 0) : recent_(recent) {}
  // Adds the softmax row a[0..n) of the query at `qpos` (n >= the rows held: rows beyond those
  // join). With a ring, it replaces the row of the query at qpos - recent. Queries come in
  // increasing positions, at most `recent` before the newest.
  void add(const double* a, int n, int32_t qpos);
  // Grows to n rows (new rows sum 0) without a query.
  void grow(int n);
  void keep_rows(const std::vector<char>& keep);
  int rows() const { return static_cast<int>(sum_.size()); }
  // The bytes of the sums, the ring and the value norms.
  size_t bytes() const;
  const double* sums() const { return sum_.data(); }
  // Squared value norms per row, for the value prior: the owner appends one per new row.
  std::vector<float> v2;
  // Every field, for state files (state_archive.h).
  template <class A>
  void io(A& a) {
    a(recent_, sum_, ring_, v2);
  }

 private:
  int recent_;
  std::vector<double> sum_;               // [row]
  std::vector<std::vector<float>> ring_;  // [slot][row]: the query at position p in slot p % recent
};

}  // namespace slake
