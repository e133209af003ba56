// The frame of a tool's main: the arguments in llama.cpp's spellings parsed by CLI11 (--help and
// parse errors exit as CLI11 says; llama.cpp's flags that change nothing here, -fa and -ngl of a
// llama-bench or llama-perplexity line among them, are dropped and named once on stderr), then the
// tool's work; a slake::Error or running out of memory is one line on stderr and exit code 1.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "slake/error.h"
#include "llama_spellings.h"

namespace slake::tools {

template <class Run>
int parse_and_run(CLI::App& app, int argc, char** argv, Run&& run) {
  std::vector<std::string> notes;
  try {
    app.parse(llama_cpp_args(argc, argv, {}, common_ignored_flags(), &notes));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string tool = argc > 0 ? std::string(argv[0]).substr(std::string(argv[0]).find_last_of('/') + 1) : "slake";
  for (const std::string& n : notes) std::fprintf(stderr, "%s: %s\n", tool.c_str(), n.c_str());
  try {
    run();
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  }
  return 0;
}

}  // namespace slake::tools
