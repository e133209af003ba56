// Device memory for the kernels' callers and tests: cudaMalloc/cudaMemcpy on a GPU build, plain
// host memory when the kernels are emulated (device pointers are then host pointers). Errors
// (including a failed kernel launch, found at the next synchronisation) throw slake::gpu::Error.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

namespace slake::gpu {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool emulated();    // true when the kernels run on the host's block executor
int device_count(); // CUDA devices present (emulation: 1)
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void device_memset(void* dst, int value, size_t bytes);
// Device-to-device copy (the regions must not overlap).
void copy_device(void* dst, const void* src, size_t bytes);
// Free and total device memory (cudaMemGetInfo). Under emulation both are the emulated device's
// size: set_emulated_memory() if called, else $SLAKE_EMU_DEVICE_MEMORY (bytes, K/M/G suffixes
// allowed), else the host's physical memory.
void memory_info(size_t* free_bytes, size_t* total_bytes);
void set_emulated_memory(size_t bytes);  // 0: back to the default; no effect on a GPU build
// Waits for the device and throws if a kernel failed.
void synchronize();
// Throws if the last launch was rejected (bad configuration); a no-op under emulation.
void check_launch(const char* kernel);

// An owning device array of T.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n), p_(static_cast<T*>(device_alloc(n * sizeof(T)))) { device_memset(p_, 0, n * sizeof(T)); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { device_free(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.n_ = 0, o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    return *this;
  }

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    if (host.size() != n_) throw Error("DeviceBuffer::upload: size mismatch");
    copy_to_device(p_, host.data(), n_ * sizeof(T));
  }
  std::vector<T> download() const {
    synchronize();
    std::vector<T> host(n_);
    copy_to_host(host.data(), p_, n_ * sizeof(T));
    return host;
  }

 private:
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace slake::gpu
