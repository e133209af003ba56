// Every kernel family: included by exactly one translation unit per build (kernels.cu for nvcc,
// emu/kernels_emu.cpp for the block executor), which defines the launchers of kernels.h.
#pragma once
#include "embedding.cuh"
#include "residual.cuh"
#include "moe_rows.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "swiglu.cuh"
#include "argmax.cuh"
#include "linear_state.cuh"
#include "centroids.cuh"
#include "ptaa_decode.cuh"
#include "compact.cuh"
#include "topk.cuh"
#include "recall.cuh"
#include "prefill_attention.cuh"
#include "window_stats.cuh"
#include "backend_kernels.cuh"
