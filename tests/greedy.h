// Greedy decoding from BOS for tests that need a model's own text.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "slake/context.h"
#include "slake/model/model.h"

namespace slake::test {

// The n tokens a model picks, one at a time, each the most likely after BOS and the ones before.
inline std::vector<int32_t> greedy_ids(const Model& m, int n, int threads) {
  Context ctx(m, {n + 1, threads, 256});
  std::vector<int32_t> ids, cur{m.vocab.bos};
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    ctx.eval(cur, &logits);
    cur = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    ids.push_back(cur[0]);
  }
  return ids;
}

}  // namespace slake::test
