#include "batch_mode.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>

#include "slake/error.h"
#include "chat_session.h"
#include "generator.h"

namespace slake::cli {

namespace {

using nlohmann::json;

constexpr float kInf = std::numeric_limits<float>::infinity();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool is_special(const Vocab& v, int32_t t) {
  const int type = t >= 0 && static_cast<size_t>(t) < v.types.size() ? v.types[static_cast<size_t>(t)] : 1;
  return type == 2 || type == 3 || type == 5;  // unknown, control, unused
}

// Greedy choice; the first of equal maxima, as torch.argmax.
int32_t argmax(const std::vector<float>& logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

// A sweep setting as its response names it.
json kv_label(const KvPolicyParams& kv) {
  json j{{"policy", kv_policy_label(kv)}, {"compensate", kv.compensator()}, {"budget", kv.budget}};
  if (kv.recall().on()) {
    j["recall_pages"] = kv.recall_pages;
    j["recall_score"] = recall_score_name(kv.recall_score);
    j["store_type"] = kv_type_name(kv.store_type);
    if (kv.recall_every != 1) j["recall_every"] = kv.recall_every;
  }
  return j;
}

std::string dump_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string decode_skip_special(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> kept;
  kept.reserve(tokens.size());
  for (const int32_t t : tokens)
    if (!is_special(tokenizer.vocab(), t)) kept.push_back(t);
  return tokenizer.detokenize(kept, false);
}

BatchRunner::BatchRunner(const CliOptions& o, const Tokenizer& tokenizer, tools::SweepSessions& sessions)
    : o_(o), tokenizer_(tokenizer), sessions_(sessions), name_settings_(!o.kv_sweep.empty()),
      eog_(end_of_generation_tokens(tokenizer.vocab())) {}

BatchPrompt BatchRunner::build_prompt(const BatchRequest& r) {
  const Vocab& v = tokenizer_.vocab();
  BatchPrompt p;
  p.text = r.prompt;
  std::vector<int32_t> full = tokenizer_.tokenize(r.prompt, v.add_bos, true);
  p.n_tokens_in = static_cast<int>(full.size());
  if (r.truncate_tokens > 0 && p.n_tokens_in > r.truncate_tokens) {
    const size_t half = static_cast<size_t>(r.truncate_tokens / 2);
    p.text = decode_skip_special(tokenizer_, std::vector<int32_t>(full.begin(), full.begin() + half)) +
             decode_skip_special(tokenizer_, std::vector<int32_t>(full.end() - half, full.end()));
    p.truncated = true;
    full.clear();
  }
  if (r.chat) {
    ChatSession session(choose_chat_template(o_, v), tokenizer_, o_.system_prompt);
    p.tokens = session.user_turn(p.text);
    p.text = session.last_turn_text();
  } else {
    p.tokens = p.truncated ? tokenizer_.tokenize(p.text, v.add_bos, true) : std::move(full);
  }
  if (p.tokens.empty()) fail("the prompt is empty and the vocabulary adds no BOS: nothing to generate from");
  return p;
}

namespace {

// One sequence's greedy decode: its logits, the tokens it has generated and why it stopped.
struct GreedySequence {
  std::vector<float> logits;
  std::vector<int32_t> out;
  std::string reason = "length";
  bool done = false;

  // Picks the next token from `logits`, as Hugging Face's greedy search with min_length and stop
  // tokens does. Returns it when the sequence goes on (its logits then come from evaluating it),
  // or -1 when it has ended here.
  int32_t next(const BatchRequest& r, const std::unordered_set<int32_t>& eog, const std::unordered_set<int32_t>& stop,
               int n_past, int n_ctx) {
    const int n = static_cast<int>(out.size());
    if (r.max_new_tokens >= 0 && n >= r.max_new_tokens) return finish("length");
    if (n < r.min_new_tokens) {  // Hugging Face's min_length: no end of the reply yet
      for (const auto* set : {&eog, &stop})
        for (const int32_t t : *set)
          if (static_cast<size_t>(t) < logits.size()) logits[static_cast<size_t>(t)] = -kInf;
    }
    const int32_t tok = argmax(logits);
    if (eog.count(tok)) return finish("eos");
    out.push_back(tok);
    if (stop.count(tok)) return finish("stop");
    if (static_cast<int>(out.size()) == r.max_new_tokens) return finish("length");
    if (n_past >= n_ctx) return finish("context");
    return tok;
  }
  int32_t finish(const char* why) {
    reason = why;
    done = true;
    return -1;
  }
};

}  // namespace

std::vector<json> BatchRunner::run(const BatchRequest& r) {
  const BatchPrompt p = build_prompt(r);
  tools::Session& first = sessions_.session(0);
  if (static_cast<int64_t>(p.tokens.size()) > first.n_ctx())
    fail("the prompt is " + std::to_string(p.tokens.size()) + " tokens, more than the context holds (-c " +
         std::to_string(first.n_ctx()) + ")");
  std::unordered_set<int32_t> stop_tokens;
  for (const std::string& s : r.stop) {
    const std::vector<int32_t> t = tokenizer_.tokenize(s, false, false);
    if (!t.empty()) stop_tokens.insert(t.back());
  }

  const size_t n_seq = sessions_.size();
  std::vector<GreedySequence> seqs(n_seq);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<float>> step_logits;
  sessions_.prefill(p.tokens, &step_logits);
  for (size_t i = 0; i < n_seq; ++i) seqs[i].logits.swap(step_logits[i]);
  const double prefill_s = seconds_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<int32_t> step_tokens;
    std::vector<size_t> who;
    for (size_t i = 0; i < n_seq; ++i) {
      if (seqs[i].done) continue;
      const int32_t tok = seqs[i].next(r, eog_, stop_tokens, sessions_.session(i).n_past(), sessions_.session(i).n_ctx());
      if (tok < 0) continue;
      who.push_back(i);
      step_tokens.push_back(tok);
    }
    if (who.empty()) break;
    sessions_.step(who, step_tokens, &step_logits);
    for (size_t j = 0; j < who.size(); ++j) seqs[who[j]].logits.swap(step_logits[j]);
  }
  const double decode_s = seconds_since(t1);

  std::vector<json> resps;
  for (size_t i = 0; i < n_seq; ++i) {
    json resp = {{"id", r.id},
                 {"text", decode_skip_special(tokenizer_, seqs[i].out)},
                 {"n_prompt_tokens_in", p.n_tokens_in},
                 {"n_prompt_tokens", p.tokens.size()},
                 {"truncated", p.truncated},
                 {"n_gen", seqs[i].out.size()},
                 {"stop_reason", seqs[i].reason},
                 {"prefill_s", prefill_s},
                 {"decode_s", decode_s}};
    if (r.echo_prompt) resp["prompt_text"] = p.text;
    if (name_settings_) resp["kv"] = kv_label(sessions_.kv(i));
    resps.push_back(std::move(resp));
  }
  return resps;
}

int BatchRunner::run_all(std::istream& in, std::FILE* out) {
  std::string line;
  int answered = 0, errors = 0;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json id;  // null until the request is read
    std::vector<json> resps;
    try {
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        fail(std::string("invalid JSON: ") + e.what());
      }
      if (j.is_object() && j.contains("id")) id = j.at("id");
      resps = run(parse_batch_request(j, o_.n_predict));
    } catch (const std::exception& e) {  // slake::Error, and out of memory for one huge prompt
      const std::string why = "request line " + std::to_string(line_no) + ": " + e.what();
      resps.assign(sessions_.size(), json{{"id", id}, {"error", why}});
      if (name_settings_)
        for (size_t i = 0; i < resps.size(); ++i) resps[i]["kv"] = kv_label(sessions_.kv(i));
      ++errors;
      std::fprintf(stderr, "batch: %s\n", why.c_str());
    }
    for (const json& resp : resps) {
      const std::string text = dump_line(resp);
      std::fwrite(text.data(), 1, text.size(), out);
    }
    std::fflush(out);
    ++answered;
  }
  if (in.bad()) fail("reading the batch requests failed");
  std::fprintf(stderr, "batch: %d requests, %d failed\n", answered, errors);
  return errors;
}

int run_batch(const CliOptions& o, const Tokenizer& tokenizer, tools::SweepSessions& sessions) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (o.batch_in != "-") {
    file.open(o.batch_in, std::ios::binary);
    if (!file) fail(o.batch_in + ": cannot open the batch requests");
    in = &file;
  }
  std::FILE* out = stdout;
  if (o.batch_out != "-") {
    out = std::fopen(o.batch_out.c_str(), "wb");
    if (!out) fail(o.batch_out + ": cannot write the batch responses");
  }
  BatchRunner runner(o, tokenizer, sessions);
  try {
    runner.run_all(*in, out);
  } catch (...) {
    if (out != stdout) std::fclose(out);
    throw;
  }
  if (out != stdout && std::fclose(out) != 0) fail(o.batch_out + ": write error");
  return 0;
}

}  // namespace slake::cli
