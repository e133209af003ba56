// What the eviction policies score tokens and layers with (algorithm.md §2.2-2.4 and §5): softmax
// rows of a query over a KV head's retained keys, the observation-window statistics (CAKE's token
// indicator and layer preference, SnapKV's pooled window attention), H2O's accumulated attention
// and SLAKE's VABS layer preference. Everything is accumulated in double.
#pragma once
#include <cstdint>
#include <vector>

#include "slake/kv/attention.h"
#include "slake/kv/kv_cache.h"
#include "slake/cpu/lanes.h"
#include "slake/cpu/thread_pool.h"

namespace slake {

// The 1-D pooling along positions that smooths token scores before top-k: average over a kernel
// of 5 (zero padding, always divided by 5: algorithm.md §2.3) or maximum over a kernel of 7 (SnapKV).
enum class TokenPool { Avg5, Max7 };
void pool_tokens(const double* in, int n, TokenPool pool, double* out);

// A decode query's scores against the rows of one KV head, for its `group` query heads: computed
// once per step (algorithm.md §5.2) and read by the eviction score and the attention alike
// (attention.h, attention_decode). Lane block b holds query heads b * kLanes ..: lane r of x[b][j]
// is q_{b * kLanes + r} . k_j / sqrt(d) (soft-capped when softcap > 0), -inf where row j is after
// qpos (causal, no window).
struct DecodeRowScores {
  int group = 0, n = 0;
  std::vector<std::vector<lanes_f>> x;  // [lane block][row]

  // The scores of q ([group][d], after RoPE) at qpos against every row of kh.
  void compute(const float* q, int group, int32_t qpos, const KvHead& kh, int d, float softcap);
  // Drops row r, as the cache drops it when it evicts that row.
  void erase(int r);
  // Keeps the rows flagged in keep (size n), in order.
  void keep_rows(const std::vector<char>& keep);
};

// The decode score of algorithm.md §5.3 for the first n_cand rows: for each query head, its softmax
// over all the rows of `xs`, pooled along the candidates; score[j] is the mean over the heads. The
// softmax runs in fp32 lanes, the mean in double.
void decode_scores(const DecodeRowScores& xs, int n_cand, TokenPool pool, double* score);

class RowBlock;

// Observing queries i0 .. i0 + rows - 1 of query head h (q_window, S and n_obs as window_stats
// takes them; rows = min(kLanes, n_obs - i0)) scored against every row of `kv` the last of them
// sees, one lane a query (RowBlock::scores through `block`, soft-capped by `softcap`, -inf where a
// row lies after the lane's query), into x. Returns rows.
int score_window_block(const float* q_window, int S, int n_obs, int i0, int h, const AttentionShape& s, const KvHead& kv,
                       float softcap, RowBlock& block, std::vector<lanes_f>& x);

// The observation-window statistics of one layer.
struct LayerStats {
  std::vector<std::vector<float>> indicator;  // [kv head][j in P]: pooled, averaged over the group
  double entropy = 0.0;                       // Hn (CAKE), over j in P
  double variance = 0.0;                      // Vr (CAKE), over j in P
};

// q_window: the last `n_obs` queries of the prompt ([n_obs][n_heads * head_dim], after RoPE), at
// positions S - n_obs .. S - 1; they score the held tokens at positions below P (P <= S - n_obs:
// the tokens from P on are the kept window, which may hold more tokens than it has observing
// queries). The layer's cache holds its rows in position order: all S prompt tokens, or (a prompt
// prefilled in chunks) what earlier chunks kept and the last chunk. indicator[g][r] is row r's,
// for the rows r < rows_below(head g, P); pooling runs over neighbouring rows.
// indicator = pool(mean_i A + gamma var_i A) per query head, then the mean over its group.
// The rows of a head whose positions are below `pos` (rows hold increasing positions).
int rows_below(const KvHead& kh, int32_t pos);

LayerStats window_stats(const float* q_window, int S, int n_obs, int P, const KvCache& cache, int layer,
                        const AttentionShape& s, double gamma, TokenPool pool, ThreadPool& threads);

// H2O: for each of the n queries (positions qpos[t], after RoPE), adds its softmax row, averaged
// over the query heads of each KV head, to acc[kv head][row]; acc[kvh] grows to the head's rows.
// gain_budget > 0: each query's logits take the step gain step_gain(qpos + 1, gain_budget) (AhaKV,
// kv_ahakv.h).
void accumulate_attention(const float* q, const int32_t* qpos, int n, const KvCache& cache, int layer,
                          const AttentionShape& s, std::vector<std::vector<double>>& acc, ThreadPool& threads,
                          int64_t gain_budget = 0);
// One decode query's softmax row, averaged over the group, from its scores against one KV head's
// rows (computed already): row[0..xs.n), the logits multiplied by `gain` (AhaKV's step gain; 1:
// the model's own softmax).
void decode_attention_row(const DecodeRowScores& xs, double gain, double* row);

// VABS (SLAKE eq. 15-18): compares each observing query's true softmax row with the row PTAA gives
// when the layer keeps the `keep` best prefix tokens by `indicator` plus the window and folds the
// rest into the linear state (q_window, n_obs and P as for window_stats). Returns the means over
// heads and observing queries of TV * VA and of the entropy En; the layer preference is
// tv_va^alpha * entropy^beta.
struct VabsTerms {
  double tv_va = 0.0;
  double entropy = 0.0;
};
VabsTerms vabs_terms(const float* q_window, int S, int n_obs, int P, const KvCache& cache, int layer, const AttentionShape& s,
                     const std::vector<std::vector<float>>& indicator, int64_t keep, ThreadPool& threads);

// The `keep` best entries of score[0..n) (ties: the earlier index first), as a flag per entry.
std::vector<char> top_k_flags(const float* score, int n, int64_t keep);
std::vector<char> top_k_flags(const double* score, int n, int64_t keep);

}  // namespace slake
