// Main of the kernel tests. On a GPU build without a CUDA device the whole run is skipped (exit
// code 77, which ctest reports as skipped) rather than passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "device_memory.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!slake::gpu::emulated() && slake::gpu::device_count() == 0) {
    std::printf("no CUDA device: the GPU kernel tests are skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
