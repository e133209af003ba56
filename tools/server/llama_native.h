// llama-server's native completion API (POST /completion and /completions) over the text
// completion path: its request fields (prompt, n_predict, the sampling fields, grammar,
// json_schema, logit_bias in either form, return_tokens, cache_prompt) become the OpenAI request
// they mean, which parse_request checks as any other; the reply comes back in llama-server's shape
// (content, tokens, stop, stop_type eos / word / limit, stopping_word, tokens_predicted,
// tokens_evaluated, tokens_cached, timings), streamed as "data: {...}" lines whose last one has
// stop: true (no [DONE]). A field llama-server has and this server does not is a 400 naming it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "openai_request.h"
#include "task.h"

namespace slake::server {

// The OpenAI completions body (JSON text) of a native /completion body; throws ApiError (400).
std::string native_to_openai(const std::string& body);

// A streamed piece, and the final object (whole `content` when not streamed, "" when it was).
nlohmann::json native_partial(const Piece& p, int n_gen, int n_prompt);
nlohmann::json native_final(const ApiRequest& req, const std::string& content, const std::vector<int32_t>& tokens,
                            const Task& done, const std::string& prompt_text);

}  // namespace slake::server
