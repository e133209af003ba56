// device_memory.h on a CUDA device.
#include <cuda_runtime.h>

#include <string>

#include "device_memory.h"

namespace slake::gpu {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

bool emulated() { return false; }
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the sticky error
    return 0;
  }
  return n;
}
void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}
void device_free(void* p) {
  if (p) cudaFree(p);
}
void copy_to_device(void* dst, const void* src, size_t bytes) { check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D"); }
void copy_to_host(void* dst, const void* src, size_t bytes) { check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H"); }
void device_memset(void* dst, int value, size_t bytes) { check(cudaMemset(dst, value, bytes), "cudaMemset"); }
void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
}
void memory_info(size_t* free_bytes, size_t* total_bytes) { check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo"); }
void set_emulated_memory(size_t) {}
void synchronize() { check(cudaDeviceSynchronize(), "kernel"); }
void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace slake::gpu
