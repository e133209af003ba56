// slake-convert-llama2c: llama2.c checkpoint + tokenizer -> GGUF and/or Hugging Face directory.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "slake/error.h"
#include "slake/model/llama2c.h"

int main(int argc, char** argv) {
  CLI::App app{"slake-convert-llama2c: convert a llama2.c checkpoint to GGUF and/or a Hugging Face directory"};
  std::string checkpoint, tokenizer, gguf, hf;
  app.add_option("checkpoint", checkpoint, "llama2.c model (.bin)")->required()->check(CLI::ExistingFile);
  app.add_option("--tokenizer", tokenizer, "llama2.c tokenizer (.bin)")->required()->check(CLI::ExistingFile);
  app.add_option("--gguf", gguf, "GGUF file to write");
  app.add_option("--hf", hf, "Hugging Face directory to write (created if missing)");
  CLI11_PARSE(app, argc, argv);
  if (gguf.empty() && hf.empty()) {
    std::fprintf(stderr, "error: nothing to write: give --gguf and/or --hf\n");
    return 2;
  }
  try {
    if (!hf.empty() && ::mkdir(hf.c_str(), 0755) != 0 && errno != EEXIST) slake::fail(hf + ": cannot create directory");
    slake::convert_llama2c(checkpoint, tokenizer, gguf, hf);
  } catch (const slake::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
