// Self-recall error (SRE) and SRE-mass cache sizing (Analemma's adaptive SRE-mass sizing for
// hybrid linear attention; algorithm.md §2.8): the tokens worth keeping exact are those the
// compensator reconstructs worst. A token's SRE is the squared L2 distance between its value and
// what the compensator's state alone answers to its own key as the query; SRE-mass keeps, per KV
// head, the fewest tokens of highest SRE whose errors sum to a share p of the head's total.
#pragma once
#include <cstdint>

#include "slake/kv/kv_cache.h"
#include "slake/kv/linear_cache.h"

namespace slake {

// `base` with rows [r0, r1) of `kh` absorbed, in order (what the state would hold were they evicted).
LinearState state_with_rows(const KvHead& kh, int r0, int r1, const LinearState& base, int d);

// sre[i] for rows r0 + i of `kh`, i < r1 - r0: |o(k) - v|^2 with o(k) the output of `state` alone
// (PTAA with no exact row, algorithm.md §4) for the row's key k (after RoPE) as the query and v its
// value. 0 when the state holds nothing.
// softcap: the model's attention logit soft-cap, which the compensator applies (ptaa_finish).
void self_recall_errors(const KvHead& kh, int r0, int r1, const LinearState& state, int d, float* sre, float softcap = 0.0f);

// How many of n tokens SRE-mass keeps: the fewest whose largest errors sum to at least p times the
// total (0 when the total is 0), then at least `floor` and at most `cap` (and n).
int64_t sre_mass_keep(const float* sre, int n, double p, int64_t floor, int64_t cap);

}  // namespace slake
