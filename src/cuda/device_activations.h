// The activations of a model's device contexts (their DevicePlan's "activations" group: the rows
// a forward pass works in, the logits, the positions, the RoPE table and attention's scratch) in
// one allocation that every context of the same model and layout shares, as the server's slots
// and a sweep's sessions do. A context keeps nothing in them from one call to the next (each call
// writes what it reads; the RoPE table, written when a context is made, is the same for every
// context of the model and context size, both part of the layout), so contexts that run one at a
// time can share them: at n_ctx 32768 on the TinyLlama shape the hidden rows alone are 256 MiB a
// context.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/device_plan.h"
#include "device_memory.h"
#include "slake/model/model.h"

namespace slake::gpu {

// Their allocation: plan.activation_bytes() of zeroed device memory.
using DeviceActivations = DeviceBuffer<uint8_t>;

// The activations of contexts of `m` with plan's activation_layout(), allocated by the first
// caller and shared while any context holds them (thread-safe to obtain; the contexts sharing
// them must run one at a time); refuses (slake::Error) before allocating when they do not fit.
std::shared_ptr<DeviceActivations> shared_device_activations(const Model& m, const DevicePlan& plan);

}  // namespace slake::gpu
