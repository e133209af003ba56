// llama.cpp spells some flags with one dash and several letters (-ctk, -ctv, -sys, -cnv, -np),
// which CLI11 would read as a short flag with its value glued on (-c tk). Each tool turns them into
// their long forms before parsing.
#pragma once
#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace slake::tools {

// argv[1..] with every spelling in `own`, -ctk and -ctv (kv_flags.h) replaced by its long form,
// last first: the order CLI::App::parse takes a vector in.
inline std::vector<std::string> llama_cpp_args(int argc, char** argv, const std::map<std::string, std::string>& own = {}) {
  std::map<std::string, std::string> spellings = own;
  spellings.emplace("-ctk", "--cache-type-k");
  spellings.emplace("-ctv", "--cache-type-v");
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const auto it = spellings.find(argv[i]);
    args.push_back(it != spellings.end() ? it->second : std::string(argv[i]));
  }
  std::reverse(args.begin(), args.end());
  return args;
}

}  // namespace slake::tools
