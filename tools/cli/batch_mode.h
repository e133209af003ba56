// slake-cli's batch mode (--batch FILE): the model is loaded once and each line of FILE is a
// request (batch_request.h), run in a fresh context with greedy decoding and answered by one line
// of JSON, written and flushed at once, so that a script can stream requests through one process:
//   {"id": ..., "text": "...", "n_prompt_tokens_in": 812, "n_prompt_tokens": 500, "truncated": true,
//    "n_gen": 32, "stop_reason": "eos"|"stop"|"length"|"context", "prefill_s": 0.41, "decode_s": 0.12}
// "n_prompt_tokens_in" counts the prompt as given (BOS included), "n_prompt_tokens" what the
// context was fed (after truncation and the chat template). "text" is the generated tokens decoded
// together without special tokens (so a SentencePiece reply loses its first space, as Hugging
// Face's decode does); invalid UTF-8 in it becomes U+FFFD. A request that cannot be run (bad JSON,
// a bad field, a prompt longer than the context, no chat template) is answered with
// {"id": ..., "error": "..."} and the next one is read. With --kv-sweep every request is answered
// once per KV setting, each line with "kv": {"policy", "compensate", "budget"}.
#pragma once
#include <cstdio>
#include <istream>
#include <string>
#include <unordered_set>
#include <vector>

#include "../common/backend.h"
#include "../common/kv_sweep_sessions.h"
#include "slake/kv/kv_policy.h"
#include "slake/context.h"
#include "slake/tokenizer/tokenizer.h"
#include "batch_request.h"
#include "cli_options.h"

namespace slake::cli {

// HF decode(tokens, skip_special_tokens=True): control, unknown and unused tokens left out, the
// rest detokenized together.
std::string decode_skip_special(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens);

// The prompt of a request as the official LongBench protocol builds it: truncated in the middle
// by tokens, then the chat template when asked for, then tokenized.
struct BatchPrompt {
  std::vector<int32_t> tokens;  // what the context is fed
  std::string text;             // the text those tokens come from
  int n_tokens_in = 0;          // the prompt as given, tokenized with BOS
  bool truncated = false;
};

class BatchRunner {
 public:
  // All must outlive the runner. `o` gives -sys and --chat-template (the template is looked up at
  // the first chat request, so a model without one can still run plain requests). `sessions` is
  // one KV setting, or (--kv-sweep) several: each request then runs in all of them (one forward
  // pass of its prompt on the cpu, SweepSessions::prefill), their greedy decodes stepped together
  // (SweepSessions::step), and is answered by one line per setting, in their order, each with a
  // "kv" field naming its setting.
  BatchRunner(const CliOptions& o, const Tokenizer& tokenizer, tools::SweepSessions& sessions);

  BatchPrompt build_prompt(const BatchRequest& r);
  // Runs one request: one response per session; slake::Error for a request that cannot run.
  std::vector<nlohmann::json> run(const BatchRequest& r);
  // Reads requests until the end of `in`, writing the response lines to `out`. Returns the
  // number of requests answered with an error.
  int run_all(std::istream& in, std::FILE* out);

 private:
  const CliOptions& o_;
  const Tokenizer& tokenizer_;
  tools::SweepSessions& sessions_;
  bool name_settings_;  // --kv-sweep: each response says its "kv"
  std::unordered_set<int32_t> eog_;
};

// The batch mode of slake-cli: opens --batch and --batch-out ("-": standard input and output) and
// runs every request. Returns the process's exit code (0 when the input was read to its end, even
// if some requests failed: their responses say why).
int run_batch(const CliOptions& o, const Tokenizer& tokenizer, tools::SweepSessions& sessions);

}  // namespace slake::cli
