// Models with random weights generated in memory, for latency and memory benchmarks of real shapes
// without their files (slake-bench --synthetic). The weights are seeded and deterministic; the
// text they produce is meaningless.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slake/quant/dtype.h"
#include "slake/model/model.h"

namespace slake {

struct SyntheticPreset {
  std::string name;
  ModelConfig cfg;
};

// llama-3.1-8b (128K context), llama-2-7b, mistral-7b-v0.3, tinyllama-1.1b and tiny.
const std::vector<SyntheticPreset>& synthetic_presets();

// A model of the preset's shape with random weights of type `type` (norms are F32 ones). Matrix
// entries are scaled by 1/sqrt(fan-in) so activations stay in range through every layer.
std::unique_ptr<Model> make_synthetic_model(const std::string& preset, DType type, uint64_t seed);

}  // namespace slake
