#include "process_memory.h"

#include <cstdio>
#include <cstring>

namespace slake::bench {

namespace {
size_t status_kib(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  const size_t klen = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, klen) == 0 && line[klen] == ':') {
      std::sscanf(line + klen + 1, "%zu", &kib);
      break;
    }
  std::fclose(f);
  return kib;
}
}  // namespace

size_t current_rss_bytes() { return status_kib("VmRSS") * 1024; }
size_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }
size_t anon_rss_bytes() { return status_kib("RssAnon") * 1024; }

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace slake::bench
