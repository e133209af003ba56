// device_memory.h for the emulated kernels: device memory is host memory.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <cstring>

#include "device_memory.h"

namespace slake::gpu {

bool emulated() { return true; }
int device_count() { return 1; }
void* device_alloc(size_t bytes) {
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) throw Error("device_alloc: out of memory");
  return p;
}
void device_free(void* p) { std::free(p); }
void copy_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void device_memset(void* dst, int value, size_t bytes) { std::memset(dst, value, bytes); }
void copy_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

namespace {
size_t g_emulated_memory = 0;
size_t default_emulated_memory() {
  if (const char* env = std::getenv("SLAKE_EMU_DEVICE_MEMORY")) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end == env || v <= 0) throw Error(std::string("SLAKE_EMU_DEVICE_MEMORY: not a size: ") + env);
    switch (*end) {
      case 'K': case 'k': v *= 1024.0; break;
      case 'M': case 'm': v *= 1024.0 * 1024.0; break;
      case 'G': case 'g': v *= 1024.0 * 1024.0 * 1024.0; break;
      default: break;
    }
    return static_cast<size_t>(v);
  }
  return static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGE_SIZE));
}
}  // namespace

void memory_info(size_t* free_bytes, size_t* total_bytes) {
  const size_t m = g_emulated_memory ? g_emulated_memory : default_emulated_memory();
  *free_bytes = m;
  *total_bytes = m;
}
void set_emulated_memory(size_t bytes) { g_emulated_memory = bytes; }
void synchronize() {}
void check_launch(const char*) {}

}  // namespace slake::gpu
