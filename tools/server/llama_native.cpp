#include "llama_native.h"

#include <algorithm>

#include "api_error.h"

namespace slake::server {

namespace {

using ojson = nlohmann::ordered_json;

}  // namespace

std::string native_to_openai(const std::string& text) {
  const ojson body = ojson::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  // Passed on as they are (the same names and meanings in the OpenAI request), or mapped below.
  static const char* const kSame[] = {"prompt", "stream", "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                                      "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop",
                                      "ignore_eos", "grammar", "json_schema", "return_tokens", "kv_policy", "kv_budget",
                                      "kv_window", "kv_observe", "kv_prefill_chunk", "kv_recall_pages", "kv_store_type",
                                      "kv_recall_score", "kv_recall_every", "kv_selector", "kv_ahakv", "kv_sre_mass",
                                      "kv_sre_floor", "model", "typical_p", "xtc_probability",
                                      "xtc_threshold", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier",
                                      "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers"};
  // llama-server's fields that change nothing here: a slot always keeps its conversation's cache.
  static const char* const kNoOp[] = {"cache_prompt", "timings_per_token"};
  ojson out = ojson::object();
  for (const auto& [k, v] : body.items()) {
    if (std::find(std::begin(kSame), std::end(kSame), k) != std::end(kSame)) {
      out[k] = v;
    } else if (k == "n_predict") {
      if (!v.is_number_integer()) throw bad_field("n_predict", "'n_predict' must be an integer (-1: no limit)");
      if (v.get<long long>() >= 0) out["max_tokens"] = v;
      else if (v.get<long long>() != -1) throw bad_field("n_predict", "'n_predict' must be -1 or >= 0, got " + v.dump());
    } else if (k == "logit_bias") {
      // llama-server also takes [[token, bias], ...], with false for a ban.
      if (v.is_array()) {
        ojson m = ojson::object();
        for (const ojson& pair : v) {
          if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || (!pair[1].is_number() && !pair[1].is_boolean()))
            throw bad_field("logit_bias", "'logit_bias' as an array holds [token id, bias or false] pairs");
          if (pair[1].is_boolean() && pair[1].get<bool>()) throw bad_field("logit_bias", "'logit_bias': a bias of true means nothing");
          m[pair[0].dump()] = pair[1].is_boolean() ? ojson(-100) : pair[1];
        }
        out["logit_bias"] = m;
      } else {
        out["logit_bias"] = v;
      }
    } else if (k == "id_slot") {
      if (!(v.is_number_integer() && v.get<long long>() == -1))
        throw bad_field("id_slot", "'id_slot' must be -1: the server chooses the slot (the one whose cache the prompt continues)");
    } else if (k == "n_probs") {
      if (!(v.is_number_integer() && v.get<long long>() == 0))
        throw bad_field("n_probs", "'n_probs' is not supported here; ask /v1/completions for 'logprobs'");
    } else if (std::find(std::begin(kNoOp), std::end(kNoOp), k) == std::end(kNoOp)) {
      throw bad_field(k, "'" + k + "' is not a field of /completion this server understands");
    }
  }
  if (!out.contains("prompt")) throw bad_field("prompt", "'prompt' is required");
  return out.dump();
}

nlohmann::json native_partial(const Piece& p, int n_gen, int n_prompt) {
  return {{"index", 0},        {"content", p.text},          {"tokens", p.ids},
          {"stop", false},     {"id_slot", -1},              {"tokens_predicted", n_gen},
          {"tokens_evaluated", n_prompt}};
}

nlohmann::json native_final(const ApiRequest& req, const std::string& content, const std::vector<int32_t>& tokens,
                            const Task& done, const std::string& prompt_text) {
  const std::string& finish = done.finish_reason();
  const std::string stop_type = finish == "length" ? "limit" : !done.stop_word().empty() ? "word" : "eos";
  const int processed = done.n_prompt() - done.n_cached();
  const auto per = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
  const auto rate = [](double ms, int n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  const SamplerParams& s = req.gen.sampling;
  return {{"index", 0},
          {"content", content},
          {"tokens", req.return_tokens ? nlohmann::json(tokens) : nlohmann::json::array()},
          {"id_slot", -1},
          {"stop", true},
          {"model", req.model},
          {"tokens_predicted", done.n_gen()},
          {"tokens_evaluated", done.n_prompt()},
          {"generation_settings",
           {{"n_predict", req.gen.max_tokens}, {"seed", s.seed}, {"temperature", s.temp}, {"top_k", s.top_k},
            {"top_p", s.top_p}, {"min_p", s.min_p}, {"repeat_penalty", s.repeat_penalty}, {"repeat_last_n", s.repeat_last_n},
            {"presence_penalty", s.presence_penalty}, {"frequency_penalty", s.frequency_penalty}, {"stop", req.gen.stop},
            {"ignore_eos", req.gen.ignore_eos}}},
          {"prompt", prompt_text},
          {"has_new_line", content.find('\n') != std::string::npos},
          {"truncated", false},
          {"stop_type", stop_type},
          {"stopping_word", done.stop_word()},
          {"tokens_cached", done.n_cached()},
          {"timings",
           {{"cache_n", done.n_cached()},
            {"prompt_n", processed},
            {"prompt_ms", done.prompt_ms()},
            {"prompt_per_token_ms", per(done.prompt_ms(), processed)},
            {"prompt_per_second", rate(done.prompt_ms(), processed)},
            {"predicted_n", done.n_gen()},
            {"predicted_ms", done.gen_ms()},
            {"predicted_per_token_ms", per(done.gen_ms(), done.n_gen())},
            {"predicted_per_second", rate(done.gen_ms(), done.n_gen())}}}};
}

}  // namespace slake::server
