// slake-tokenize: the token ids of a text, from a model's vocabulary (GGUF file, vocabulary-only
// GGUF file or Hugging Face directory), like llama.cpp's llama-tokenize.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "slake/error.h"
#include "slake/format/mapped_file.h"
#include "slake/tokenizer/tokenizer.h"
#include "slake/tokenizer/vocab.h"

namespace {

std::string read_input(const std::string& file) {
  if (file != "-") return slake::read_text_file(file);
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) slake::fail("standard input: read error");
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"slake-tokenize: print the token ids of a text"};
  std::string model_path, prompt, file;
  bool no_bos = false, parse_special = false, show_pieces = false, ids = false;
  app.add_option("-m,--model", model_path, "GGUF file (vocabulary-only files too) or Hugging Face directory")->required();
  app.add_option("-p,--prompt", prompt, "the text");
  app.add_option("-f,--file", file, "read the text from a file (- for standard input)");
  app.add_flag("--no-bos", no_bos, "do not add BOS (by default it is added when the vocabulary says so)");
  app.add_flag("--parse-special", parse_special, "turn the text of control tokens (\"<s>\", \"<|eot_id|>\") into those tokens");
  app.add_flag("--show-pieces", show_pieces, "one line per token: id -> 'piece' (llama-tokenize's default output)");
  app.add_flag("--ids", ids, "print the ids as [1, 2, 3] (the default; llama-tokenize's --ids)");
  CLI11_PARSE(app, argc, argv);

  const bool have_prompt = app.count("--prompt") > 0, have_file = app.count("--file") > 0;
  if (have_prompt == have_file) {
    std::fprintf(stderr, "error: give the text with exactly one of -p TEXT or -f FILE\n");
    return 1;
  }
  try {
    const std::string text = have_file ? read_input(file) : prompt;
    slake::Vocab vocab = slake::load_vocab(model_path);
    const bool add_bos = vocab.add_bos && !no_bos;
    std::unique_ptr<slake::Tokenizer> tokenizer;
    try {
      tokenizer = std::make_unique<slake::Tokenizer>(std::move(vocab));
    } catch (const slake::Error& e) {
      slake::fail(model_path + ": " + e.what());
    }
    const std::vector<int32_t> tokens = tokenizer->tokenize(text, add_bos, parse_special);
    if (show_pieces && !ids) {
      for (const int32_t t : tokens) {
        const std::string& piece = tokenizer->token_to_piece(t, true);  // may hold any byte, NUL too
        std::printf("%6d -> '", t);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::printf("'\n");
      }
    } else {
      std::string line = "[";
      for (size_t i = 0; i < tokens.size(); ++i) line += (i ? ", " : "") + std::to_string(tokens[i]);
      std::printf("%s]\n", line.c_str());
    }
  } catch (const slake::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
