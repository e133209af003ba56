// The CPU path's copy of a model's matrices: those its kernels read in a repacked layout
// (quant/weight_pack.h) copied once into that layout, the rest the model's own views.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "slake/model/model.h"

namespace slake {

struct CpuWeights {
  std::vector<LayerWeights> layers;
  TensorView output;
  // The table the embedding lookup reads: a tied output's repacked copy, else the model's own.
  TensorView embedding;
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
};

// The model's CPU weights, made by the first caller and shared by every later one (thread-safe,
// kept in Model::derived). Made with the file's pages of each repacked matrix handed back to the OS
// (they are read again from the file if anything else touches them), so the resident set holds the
// weights once.
const CpuWeights& cpu_weights(const Model& m);

}  // namespace slake
