// A low-rank basis of one head's keys (Loki: Singhania et al., 2024), for a first pass that ranks
// the recall store's pages from a few coordinates per key instead of the whole key
// (RecallScore::Lowrank, kv_recall.h). The r directions v_i of largest variance of the keys about
// their mean mu span the space where keys differ; a key's coordinates c_i = v_i . (k - mu) / s_i and
// a query's q'_i = s_i v_i . q (s_i the keys' spread along v_i, so that every coordinate of a key
// has unit variance and rounds to int8 alike) give
//   q' . c = q . V V^T (k - mu)  =  q . k - q . mu - q . (the part of k - mu outside the span),
// which ranks a query's keys as q . k does up to what the span leaves out: q . mu is the same for
// every key.
#pragma once
#include <vector>

namespace slake {

struct KeyBasis {
  int d = 0, r = 0;  // r == 0: not fitted
  std::vector<float> mean;   // [d]
  std::vector<float> key;    // [r][d]: row i is v_i / s_i (zero where the keys do not vary along v_i)
  std::vector<float> query;  // [r][d]: row i is v_i s_i
  bool fitted() const { return r > 0; }
  // c = key (k - mean), r floats.
  void key_coords(const float* k, float* c) const;
  // q' = query q, r floats.
  void query_coords(const float* q, float* c) const;
  template <class A>
  void io(A& a) {
    a(d, r, mean, key, query);
  }
  // Whether the fields agree with each other (a state file's, before use).
  bool consistent() const;
};

// The basis of the n keys (rows of d floats): their mean, and the r leading eigenvectors of their
// covariance by subspace iteration in float64 (r <= d, n >= 1).
KeyBasis fit_key_basis(const float* keys, int n, int d, int r);

}  // namespace slake
