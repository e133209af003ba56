// The block-executor build of every kernel and launcher (kernels.h), compiled by the host compiler.
#include "all_kernels.cuh"
