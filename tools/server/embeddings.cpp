#include "embeddings.h"

#include <cmath>
#include <cstring>

#include "api_error.h"
#include "slake/error.h"

namespace slake::server {

namespace {

using nlohmann::json;

std::string base64(const std::vector<float>& v) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian on every target this builds for
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = static_cast<unsigned char>(bytes[i]);
    const uint32_t b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0;
    const uint32_t b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0;
    const uint32_t n = b0 << 16 | b1 << 8 | b2;
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace

Pooling pooling_from_name(const std::string& name) {
  if (name == "mean") return Pooling::Mean;
  if (name == "last") return Pooling::Last;
  fail("pooling '" + name + "': mean or last");
}

std::vector<float> Embedder::embed(const std::vector<int32_t>& tokens) {
  std::lock_guard<std::mutex> l(mu_);
  if (!ctx_) {
    ContextParams p;
    p.n_ctx = n_ctx_;
    p.n_threads = n_threads_;
    ctx_ = std::make_unique<Context>(model_, p);
  }
  std::vector<float> h;
  ctx_->hidden_states(tokens, &h);
  const size_t dim = static_cast<size_t>(model_.cfg.dim), n = tokens.size();
  std::vector<double> pooled(dim, 0.0);
  if (pooling_ == Pooling::Last) {
    for (size_t i = 0; i < dim; ++i) pooled[i] = h[(n - 1) * dim + i];
  } else {
    for (size_t t = 0; t < n; ++t)
      for (size_t i = 0; i < dim; ++i) pooled[i] += h[t * dim + i];
    for (double& x : pooled) x /= static_cast<double>(n);
  }
  double norm = 0;
  for (const double x : pooled) norm += x * x;
  norm = std::sqrt(norm);
  std::vector<float> out(dim);
  for (size_t i = 0; i < dim; ++i) out[i] = static_cast<float>(norm > 0 ? pooled[i] / norm : 0.0);
  return out;
}

json Embedder::serve(const std::string& text, const RequestEnv& env) {
  const json body = parse_object(text);
  for (const auto& [k, v] : body.items()) {
    (void)v;
    if (k != "input" && k != "model" && k != "encoding_format" && k != "user")
      throw bad_field(k, "'" + k + "' is not a field of /v1/embeddings this server understands");
  }
  const auto in = body.find("input");
  if (in == body.end()) throw bad_field("input", "'input' is required");
  // A string, strings, token ids, or lists of token ids.
  std::vector<std::vector<int32_t>> inputs;
  const auto ids = [&](const json& a) {
    std::vector<int32_t> t;
    for (const json& x : a) {
      if (!x.is_number_integer() || x.get<long long>() < 0 || x.get<long long>() >= env.cfg.n_vocab)
        throw bad_field("input", "'input' token ids must be integers in [0, " + std::to_string(env.cfg.n_vocab) + ")");
      t.push_back(x.get<int32_t>());
    }
    return t;
  };
  const auto tokens_of = [&](const std::string& s) {
    if (find_invalid_utf8(s) != std::string::npos) throw bad_field("input", "'input' is not valid UTF-8");
    return env.tokenizer.tokenize(s, env.tokenizer.vocab().add_bos, false);
  };
  if (in->is_string()) {
    inputs.push_back(tokens_of(in->get<std::string>()));
  } else if (in->is_array() && !in->empty() && (*in)[0].is_number()) {
    inputs.push_back(ids(*in));
  } else if (in->is_array() && !in->empty()) {
    for (const json& item : *in) {
      if (item.is_string()) inputs.push_back(tokens_of(item.get<std::string>()));
      else if (item.is_array()) inputs.push_back(ids(item));
      else throw bad_field("input", "'input' must be a string, strings, token ids or lists of token ids");
    }
  } else {
    throw bad_field("input", "'input' must be a non-empty string, strings, token ids or lists of token ids");
  }
  if (inputs.size() > 2048) throw bad_field("input", "'input' holds more than 2048 inputs");
  const std::string format = member_or<std::string>(body, "encoding_format", "float", "encoding_format");
  if (format != "float" && format != "base64") throw bad_field("encoding_format", "'encoding_format' must be float or base64");
  json data = json::array();
  size_t n_tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) throw bad_field("input", "input " + std::to_string(i) + " has no tokens");
    if (static_cast<int>(inputs[i].size()) > n_ctx_)
      throw ApiError(400, "input " + std::to_string(i) + " is " + std::to_string(inputs[i].size()) + " tokens, more than the context of " +
                              std::to_string(n_ctx_), "invalid_request_error", "input", "context_length_exceeded");
    const std::vector<float> e = embed(inputs[i]);
    n_tokens += inputs[i].size();
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", format == "base64" ? json(base64(e)) : json(e)}});
  }
  return {{"object", "list"},
          {"data", data},
          {"model", member_or<std::string>(body, "model", env.model_id, "model")},
          {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
}

}  // namespace slake::server
