// One exception type for every user-facing failure: bad files, bad flags, impossible sizes.
// Tools catch it at the top and print `error: <message>` with a non-zero exit.
#pragma once
#include <stdexcept>
#include <string>

namespace slake {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

}  // namespace slake
