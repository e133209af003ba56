// Software prefetch of a run of bytes, for the readers of data the hardware prefetchers do not
// follow (pages chosen at random from a recall store).
#pragma once
#include <cstddef>
#include <cstdint>

namespace slake {

// Asks for every cache line of [p, p + n) into L1, from the line that holds p on: a run that does
// not start on a line touches one more line than n / 64.
inline void prefetch_bytes(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), end = a + n;
  for (uintptr_t line = a & ~uintptr_t{63}; line < end; line += 64) __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
}

}  // namespace slake
