// POST /v1/embeddings (OpenAI's, llama-server's): each input's final hidden states (the output of
// the model's last norm, Context::hidden_states) pooled over its tokens, mean or last (--pooling),
// and L2-normalised as llama-server normalises them; floats, or base64 of little-endian float32
// (what the openai client asks for). The embeddings run in a context of their own on the CPU, one
// request at a time, beside the slots.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "openai_request.h"
#include "slake/context.h"

namespace slake::server {

enum class Pooling { Mean, Last };
Pooling pooling_from_name(const std::string& name);  // "mean", "last"; throws slake::Error

class Embedder {
 public:
  // `model` must outlive this; the context is made at the first request.
  Embedder(const Model& model, int n_ctx, int n_threads, Pooling pooling)
      : model_(model), n_ctx_(n_ctx), n_threads_(n_threads), pooling_(pooling) {}
  // The /v1/embeddings reply to `body`; throws ApiError (400) for a bad input.
  nlohmann::json serve(const std::string& body, const RequestEnv& env);

 private:
  std::vector<float> embed(const std::vector<int32_t>& tokens);
  const Model& model_;
  int n_ctx_, n_threads_;
  Pooling pooling_;
  std::mutex mu_;
  std::unique_ptr<Context> ctx_;
};

}  // namespace slake::server
