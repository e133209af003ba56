// The CUDA build of every kernel and launcher (kernels.h).
#include "all_kernels.cuh"
