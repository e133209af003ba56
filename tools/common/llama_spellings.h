// llama.cpp spells some flags with one dash and several letters (-ctk, -ctv, -sys, -cnv, -np, -fa,
// -ngl), which CLI11 would read as a short flag with its value glued on (-c tk, -f a). Each tool
// turns them into their long forms before parsing. Flags of llama.cpp's tools that change nothing
// here (flash attention, which is how slake always attends; -ngl on the CPU backend; continuous
// batching and metrics, which the server always does) are accepted, dropped, and reported once, so
// a launch line written for llama-server or llama-cli runs unchanged. llama.cpp's other flags of one
// dash and several letters are refused by name.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iterator>
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

// llama.cpp's flags of one dash and several letters (common/arg.cpp, 0c1e570). CLI11 would read
// one as a one-letter flag with its value glued on (-md as -m d), so those a tool does not spell
// itself are refused by the name given. Only these exact words: an option's value that starts with
// a dash (-p -hello, -r -User) passes through.
inline bool llama_cpp_multi_letter_flag(const std::string& a) {
  static const char* const kFlags[] = {
      "-Cb",   "-Cbd",   "-Cd",     "-Cr",    "-Crb",  "-Crbd", "-Crd",  "-ag",    "-bf",   "-bs",    "-cb",   "-cl",
      "-cmoe", "-cmoed", "-cms",    "-cnv",   "-co",   "-cram", "-ctk",  "-ctkd",  "-ctv",  "-ctvd",  "-ctxcp", "-dev",
      "-devd", "-dt",    "-gan",    "-gaw",   "-hf",   "-hfd",  "-hff",  "-hfr",   "-hfrd", "-hft",   "-if",   "-jf",
      "-kvo",  "-kvu",   "-lcd",    "-lcs",   "-lm",   "-lv",   "-lzm",  "-md",    "-mg",   "-mli",   "-mm",   "-mmdev",
      "-mmu",  "-mu",    "-ncffn",  "-ncmoe", "-ncmoed", "-ngl", "-ngld", "-nkvo", "-no-ag", "-no-cnv", "-no-kvu", "-nocb",
      "-np",   "-npl",   "-npp",    "-nr",    "-ns",   "-ntg",  "-ofreq", "-opt",  "-ot",   "-otd",   "-pps",  "-ptc",
      "-rea",  "-sm",    "-sp",     "-sps",   "-st",   "-sys",  "-sysf", "-tb",    "-tbd",  "-td",    "-tgs",  "-to",
      "-ts",   "-ub",    "-wd"};
  return std::find(std::begin(kFlags), std::end(kFlags), a) != std::end(kFlags);
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
    if (it == spellings.end() && llama_cpp_multi_letter_flag(a)) throw CLI::ExtrasError({a});  // -md, -hf, -dev, ...
    args.push_back(it != spellings.end() ? it->second : a);
  }
  std::reverse(args.begin(), args.end());
  return args;
}

}  // namespace slake::tools
