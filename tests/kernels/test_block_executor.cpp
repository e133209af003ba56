// The block executor that runs the kernels without a GPU: barriers, shared memory, warp shuffles
// against a scalar model, and misuse (divergent barriers) reported as errors instead of hangs.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cuda_compat.h"

namespace {

using slake::emu::KernelError;

__global__ void rotate_through_shared(int* out) {
  SLAKE_SHARED(int, buf, 256);
  const int t = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  buf[t] = t * 10 + static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = buf[(t + 1) % n];
}

TEST(BlockExecutor, BarrierMakesEveryWriteVisible) {
  // Thread t reads what thread t+1 wrote; the fibers run in order, so without the barrier every
  // thread but the last would read stale memory.
  std::vector<int> out(3 * 70);
  SLAKE_LAUNCH(dim3(3), dim3(70), 0, nullptr, rotate_through_shared)(out.data());
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 70; ++t) EXPECT_EQ(out[static_cast<size_t>(b * 70 + t)], ((t + 1) % 70) * 10 + b);
}

__global__ void block_sum_two_arrays(const float* in, float* out, int n) {
  SLAKE_SHARED(float, partial, 128);
  SLAKE_SHARED(int, count, 1);
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) count[0] = 0;
  float s = 0;
  for (int i = t; i < n; i += static_cast<int>(blockDim.x)) s += in[blockIdx.x * n + i];
  partial[t] = s;
  __syncthreads();
  atomicAdd(&count[0], 1);
  for (int stride = static_cast<int>(blockDim.x) / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0] + 1000.0f * static_cast<float>(count[0]);
}

TEST(BlockExecutor, SharedArraysAreDistinctAndPerBlock) {
  const int n = 77, blocks = 4;
  std::vector<float> in(static_cast<size_t>(n * blocks)), out(blocks);
  std::iota(in.begin(), in.end(), 0.0f);
  SLAKE_LAUNCH(dim3(blocks), dim3(128), 0, nullptr, block_sum_two_arrays)(in.data(), out.data(), n);
  for (int b = 0; b < blocks; ++b) {
    double want = 0;
    for (int i = 0; i < n; ++i) want += b * n + i;
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(b)], static_cast<float>(want + 1000.0 * 128)) << "block " << b;
  }
}

__global__ void write_coordinates(int* out) {
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  int* o = out + 6 * (block * per_block + thread);
  o[0] = static_cast<int>(blockIdx.x), o[1] = static_cast<int>(blockIdx.y), o[2] = static_cast<int>(blockIdx.z);
  o[3] = static_cast<int>(threadIdx.x), o[4] = static_cast<int>(threadIdx.y), o[5] = static_cast<int>(threadIdx.z);
}

TEST(BlockExecutor, ThreeDimensionalGridAndBlock) {
  const dim3 grid(2, 3, 2), block(5, 2, 3);
  std::vector<int> out(static_cast<size_t>(12 * 30 * 6), -1);
  SLAKE_LAUNCH(grid, block, 0, nullptr, write_coordinates)(out.data());
  size_t i = 0;
  for (int bz = 0; bz < 2; ++bz)
    for (int by = 0; by < 3; ++by)
      for (int bx = 0; bx < 2; ++bx)
        for (int tz = 0; tz < 3; ++tz)
          for (int ty = 0; ty < 2; ++ty)
            for (int tx = 0; tx < 5; ++tx, i += 6) {
              const std::vector<int> want{bx, by, bz, tx, ty, tz};
              ASSERT_EQ(std::vector<int>(out.begin() + static_cast<long>(i), out.begin() + static_cast<long>(i) + 6), want);
            }
}

__global__ void shuffles(const int* in, int* out, int width) {
  const int t = static_cast<int>(threadIdx.x);
  const int v = in[t];
  int* o = out + 4 * t;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 5, width);
  o[1] = __shfl_down_sync(0xffffffffu, v, 3, width);
  o[2] = __shfl_up_sync(0xffffffffu, v, 2, width);
  o[3] = __shfl_sync(0xffffffffu, v, 7, width);
}

// CUDA's documented shuffle semantics, lane by lane.
std::vector<int> shuffle_model(const std::vector<int>& in, int width) {
  const int n = static_cast<int>(in.size());
  std::vector<int> out(static_cast<size_t>(4 * n));
  for (int t = 0; t < n; ++t) {
    const int lane = t % 32, warp0 = t - lane, seg = lane / width * width, in_seg = lane % width;
    const int x = lane ^ 5;
    out[static_cast<size_t>(4 * t)] = in[static_cast<size_t>(warp0 + (x < seg + width ? x : lane))];
    out[static_cast<size_t>(4 * t + 1)] = in[static_cast<size_t>(warp0 + (in_seg + 3 < width ? lane + 3 : lane))];
    out[static_cast<size_t>(4 * t + 2)] = in[static_cast<size_t>(warp0 + (in_seg >= 2 ? lane - 2 : lane))];
    out[static_cast<size_t>(4 * t + 3)] = in[static_cast<size_t>(warp0 + seg + 7 % width)];
  }
  return out;
}

TEST(BlockExecutor, ShufflesMatchTheScalarModel) {
  for (int width : {32, 16, 8}) {
    std::vector<int> in(96);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 7 + 3);
    std::vector<int> out(4 * in.size(), -1);
    SLAKE_LAUNCH(dim3(1), dim3(96), 0, nullptr, shuffles)(in.data(), out.data(), width);
    EXPECT_EQ(out, shuffle_model(in, width)) << "width " << width;
  }
}

__global__ void warp_reduce_then_block(const float* in, float* out) {
  SLAKE_SHARED(float, warp_sums, 32);
  const int t = static_cast<int>(threadIdx.x);
  float v = in[t];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (t % 32 == 0) warp_sums[t / 32] = v;
  __syncthreads();
  if (t == 0) {
    float s = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) s += warp_sums[w];
    *out = s;
  }
  __syncwarp();
}

TEST(BlockExecutor, ButterflyReductionGivesEveryLaneTheSum) {
  std::vector<float> in(256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 13);
  float out = -1;
  SLAKE_LAUNCH(dim3(1), dim3(256), 0, nullptr, warp_reduce_then_block)(in.data(), &out);
  EXPECT_EQ(out, std::accumulate(in.begin(), in.end(), 0.0f));
}

__global__ void dynamic_shared_reverse(const float* in, float* out, int n) {
  SLAKE_DYNAMIC_SHARED(float, buf);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) buf[i] = in[i];
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) out[i] = buf[n - 1 - i];
}

TEST(BlockExecutor, DynamicSharedMemory) {
  const int n = 1000;
  std::vector<float> in(n), out(n);
  std::iota(in.begin(), in.end(), 1.0f);
  SLAKE_LAUNCH(dim3(1), dim3(64), n * sizeof(float), nullptr, dynamic_shared_reverse)(in.data(), out.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], in[static_cast<size_t>(n - 1 - i)]);
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_with_exited_lane(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void throws_in_one_thread(int* out) {
  if (threadIdx.x == 5 && blockIdx.x == 1) throw std::out_of_range("index 99");
  out[threadIdx.x] = 1;
}

std::string error_of_launch(void (*kernel)(int*), int threads, int blocks = 1) {
  std::vector<int> out(static_cast<size_t>(threads));
  try {
    SLAKE_LAUNCH(dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(threads)), 0, nullptr, kernel)(out.data());
  } catch (const KernelError& e) {
    return e.what();
  }
  return "";
}

TEST(BlockExecutor, DivergentSyncthreadsIsAnErrorNotAHang) {
  const std::string e = error_of_launch(divergent_barrier, 64);
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
  EXPECT_NE(e.find("__syncthreads"), std::string::npos) << e;
  EXPECT_NE(e.find("thread (16,0,0)"), std::string::npos) << e;  // the first one that never comes
}

TEST(BlockExecutor, ShuffleWithAnExitedLaneIsAnError) {
  const std::string e = error_of_launch(shuffle_with_exited_lane, 32);
  EXPECT_NE(e.find("thread (3,0,0)"), std::string::npos) << e;
  EXPECT_NE(e.find("exited"), std::string::npos) << e;
}

TEST(BlockExecutor, ExceptionInAThreadNamesThatThread) {
  const std::string e = error_of_launch(throws_in_one_thread, 8, 2);
  EXPECT_NE(e.find("thread (5,0,0) of block (1,0,0): index 99"), std::string::npos) << e;
}

TEST(BlockExecutor, UsableAgainAfterAFailedLaunch) {
  ASSERT_FALSE(error_of_launch(divergent_barrier, 64).empty());
  std::vector<int> out(3 * 70);
  SLAKE_LAUNCH(dim3(3), dim3(70), 0, nullptr, rotate_through_shared)(out.data());
  EXPECT_EQ(out[0], 10);
}

TEST(BlockExecutor, BadLaunchConfigurationsAreRejected) {
  std::vector<int> out(2048);
  EXPECT_THROW(SLAKE_LAUNCH(dim3(1), dim3(2048), 0, nullptr, rotate_through_shared)(out.data()), KernelError);
  EXPECT_THROW(SLAKE_LAUNCH(dim3(0), dim3(32), 0, nullptr, rotate_through_shared)(out.data()), KernelError);
  EXPECT_THROW(__syncthreads(), KernelError);  // outside a kernel
}

}  // namespace
