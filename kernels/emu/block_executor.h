// The block executor: runs a CUDA-style grid on the host, one block after another, each block's
// threads as fibers (ucontext) that switch at every __syncthreads and warp-level exchange. Shared
// memory is a per-block arena; warp shuffles go through a per-warp exchange buffer. A barrier that
// not every thread of a block (or every lane a warp operation names) reaches is a KernelError,
// never a hang.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The running thread's coordinates, set by the executor whenever it switches fibers.
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace slake::emu {

struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr int kWarpSize = 32;
constexpr size_t kFiberStackBytes = 64 * 1024;
constexpr size_t kMaxSharedBytes = 228 * 1024;  // the largest a block may use (sm_90)

// Runs body() once per thread of every block of the grid; returns when the grid is done.
// Throws KernelError on a deadlock, a divergent shared declaration or an exception in a thread.
void run_grid(dim3 grid, dim3 block, size_t dynamic_smem, const std::function<void()>& body);

// Called from inside a running kernel thread.
void block_barrier();                                     // __syncthreads
void warp_barrier(uint32_t mask);                         // __syncwarp
void* shared_alloc(size_t bytes, size_t align);           // the next static shared array
void* dynamic_shared();                                   // the launch's dynamic shared memory
// Publishes `value` (at most 8 bytes) for the lanes of `mask`, waits for them, and returns what
// lane `src` published (own value when src is outside the warp or not in mask).
uint64_t warp_exchange(uint32_t mask, uint64_t value, int src);
int lane_id();

}  // namespace slake::emu
