// The layer definitions, one per architecture (one file each in this folder), and the table that
// maps a model's general.architecture to its definition (models.cpp).
#pragma once
#include "slake/model/layer.h"

namespace slake {

void llama_layer(const ModelConfig& c, LayerOps& ops);

}  // namespace slake
