// device_memory.h for the emulated kernels: device memory is host memory.
#include <cstdlib>
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
void synchronize() {}
void check_launch(const char*) {}

}  // namespace slake::gpu
