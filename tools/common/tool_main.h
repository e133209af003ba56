// The frame of a tool's main: the arguments in llama.cpp's spellings parsed by CLI11 (--help and
// parse errors exit as CLI11 says), then the tool's work; a slake::Error or running out of memory
// is one line on stderr and exit code 1.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>

#include "slake/error.h"
#include "llama_spellings.h"

namespace slake::tools {

template <class Run>
int parse_and_run(CLI::App& app, int argc, char** argv, Run&& run) {
  try {
    app.parse(llama_cpp_args(argc, argv));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
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
