// slake-cli: text generation from a GGUF file or a Hugging Face directory.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/model.h"
#include "slake/vocab.h"
#include "../common/kv_flags.h"

namespace {

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"slake-cli: generate text with a Llama-family model"};
  std::string model_path;
  int n_predict = 128, n_ctx = 0, n_threads = 0;
  app.add_option("-m,--model", model_path, "GGUF file or Hugging Face model directory")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate")->check(CLI::NonNegativeNumber);
  app.add_option("-c,--ctx-size", n_ctx, "context size (0: the model's)")->check(CLI::NonNegativeNumber);
  app.add_option("-t,--threads", n_threads, "threads (0: all)")->check(CLI::NonNegativeNumber);
  slake::tools::KvFlags kvf;
  slake::tools::add_kv_flags(app, kvf);
  CLI11_PARSE(app, argc, argv);
  slake::tools::finish_kv_flags(app, kvf);
  const slake::KvPolicyParams& kv = kvf.params;

  try {
    slake::validate(kv);  // bad flags fail before a large model is mapped
    auto t0 = std::chrono::steady_clock::now();
    auto model = slake::load_model(model_path);
    const slake::ModelConfig& c = model->cfg;
    std::fprintf(stderr, "loaded %s (%s): %d layers, dim %d, %d heads (%d KV), vocab %d, %.1f MiB of weights in %.0f ms\n",
                 model_path.c_str(), model->format.c_str(), c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.n_vocab,
                 model->weight_bytes() / 1048576.0,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    slake::ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    cp.kv = kv;
    slake::Context ctx(*model, cp);
    const int bos = model->vocab.bos >= 0 ? model->vocab.bos : 1;
    std::vector<int32_t> toks{bos};
    std::vector<float> logits;
    auto tg0 = std::chrono::steady_clock::now();
    int generated = 0;
    for (; generated < n_predict && ctx.n_past() < ctx.n_ctx(); ++generated) {
      ctx.eval(toks, &logits);
      const int next = argmax(logits);
      if (next == model->vocab.eos) break;
      std::fputs(slake::token_to_piece(model->vocab, next).c_str(), stdout);
      std::fflush(stdout);
      toks = {next};
    }
    std::fputs("\n", stdout);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tg0).count();
    std::fprintf(stderr, "generated %d tokens in %.3f s (%.1f tokens/s); KV cache %.2f MiB (%lld tokens held over %d layers x %d KV heads)\n",
                 generated, s, generated / s, ctx.kv_cache().bytes_used() / 1048576.0,
                 static_cast<long long>(ctx.kv_cache().tokens_held()), c.n_layers, c.n_kv_heads);
  } catch (const slake::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
