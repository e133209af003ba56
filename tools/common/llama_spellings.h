// llama.cpp spells some flags with one dash and several letters (-ctk, -ctv, -sys, -cnv, -np, -fa,
// -ngl), which CLI11 would read as a short flag with its value glued on (-c tk, -f a). Each tool
// turns them into their long forms before parsing. Flags of llama.cpp's tools that change nothing
// here (flash attention, which is how slake always attends; -ngl on the CPU backend; continuous
// batching and metrics, which the server always does) are accepted, dropped, and reported once, so
// a launch line written for llama-server or llama-cli runs unchanged. Any other llama.cpp flag of one
// dash and several letters is refused by name.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace slake::tools {

// A llama.cpp flag accepted and ignored: its spellings, how many values follow it, and why.
struct IgnoredFlag {
  std::vector<std::string> names;
  int values;
  std::string why;
};

// The ignored flags every tool accepts.
inline std::vector<IgnoredFlag> common_ignored_flags() {
  return {
      {{"-fa", "--flash-attn"}, 1, "slake's attention is always tiled with an online softmax (flash attention)"},
      {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, 1, "layers are not offloaded one by one; --backend cuda runs the whole model on the GPU"},
      {{"--no-mmap"}, 0, "weights are always memory-mapped and read in place"},
      {{"--mlock"}, 0, "weights are not locked in memory"},
  };
}

// "-md", "-no-cnv": one dash, then two or more letters or dashes (not a number, not "-").
inline bool multi_letter_short_flag(const std::string& a) {
  if (a.size() < 3 || a[0] != '-' || a[1] == '-') return false;
  return std::all_of(a.begin() + 1, a.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-'; });
}

// argv[1..] with every spelling in `own`, -ctk and -ctv (kv_flags.h) replaced by its long form, and
// every ignored flag (with its values) dropped and described in `notes`; last first: the order
// CLI::App::parse takes a vector in.
inline std::vector<std::string> llama_cpp_args(int argc, char** argv, const std::map<std::string, std::string>& own = {},
                                               const std::vector<IgnoredFlag>& ignored = {},
                                               std::vector<std::string>* notes = nullptr) {
  std::map<std::string, std::string> spellings = own;
  spellings.emplace("-ctk", "--cache-type-k");
  spellings.emplace("-ctv", "--cache-type-v");
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto ig = std::find_if(ignored.begin(), ignored.end(), [&](const IgnoredFlag& f) {
      return std::find(f.names.begin(), f.names.end(), a) != f.names.end();
    });
    if (ig != ignored.end() && i + ig->values < argc) {
      std::string given = a;
      for (int v = 0; v < ig->values; ++v) given += std::string(" ") + argv[++i];
      if (notes) notes->push_back(given + ": ignored (" + ig->why + ")");
      continue;
    }
    const auto it = spellings.find(a);
    // One dash and several letters that are not a spelling of ours: a llama.cpp flag for what slake
    // does not do (-md, -hf, -dev, ...). CLI11 would take it for a one-letter flag with its value
    // glued on (-m d), so it is refused here, by the name it was given.
    if (it == spellings.end() && multi_letter_short_flag(a)) throw CLI::ExtrasError({a});
    args.push_back(it != spellings.end() ? it->second : a);
  }
  std::reverse(args.begin(), args.end());
  return args;
}

}  // namespace slake::tools
