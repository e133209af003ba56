// One kernel source for two compilers. Under nvcc this is plain CUDA; under the host compiler the
// kernels run on the block executor (emu/), which runs each thread block's threads as fibers, so
// CI without a GPU still executes every kernel. Kernels written against this header use:
//   SLAKE_SHARED(T, name, n)       a block-shared array T name[n] (declare at the top of the kernel,
//                                  unconditionally, so every thread allocates in the same order)
//   SLAKE_DYNAMIC_SHARED(T, name)  T* name: the launch's dynamic shared memory
//   SLAKE_LAUNCH(grid, block, smem_bytes, stream, kernel)(args...)
// plus the usual builtins (threadIdx, __syncthreads, __shfl_*_sync, atomicAdd, expf, ...).
#pragma once

#include <cstdint>

struct CUstream_st;

namespace slake::gpu {
using Stream = CUstream_st*;  // cudaStream_t under CUDA; ignored by the emulation
}

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#define SLAKE_SHARED(T, name, n) __shared__ T name[n]
#define SLAKE_DYNAMIC_SHARED(T, name)                          \
  extern __shared__ __align__(16) unsigned char slake_dynamic_smem[]; \
  T* name = reinterpret_cast<T*>(slake_dynamic_smem)
#define SLAKE_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#define SLAKE_EMULATED 0

#else

#include "emu/emu_runtime.h"
#define SLAKE_EMULATED 1

#endif
