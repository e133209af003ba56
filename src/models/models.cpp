#include <string>

#include "models/models.h"
#include "slake/error.h"

namespace slake {

namespace {
struct ArchEntry {
  const char* arch;
  LayerFn layer;
};
// general.architecture (GGUF) or the HF model_type the loader maps to it.
constexpr ArchEntry kArchitectures[] = {
    {"llama", llama_layer},
    {"mistral", llama_layer},
    {"qwen2", qwen2_layer},
    {"qwen2moe", qwen2_layer},  // with experts and a shared expert: swiglu_ffn runs the mixture
    {"qwen3", qwen3_layer},
    {"qwen3moe", qwen3_layer},  // with experts: swiglu_ffn runs the mixture (models.h)
    {"gemma2", gemma_layer},
    {"gemma3", gemma_layer},
    // Phi-3 is Llama's layer: the loader splits its fused Q/K/V and gate/up tensors into views,
    // and LongRoPE is RoPE data (ModelConfig::rope_factors_for, rope_attn_factor).
    {"phi3", llama_layer},
};
}  // namespace

LayerFn layer_for(const ModelConfig& c) {
  for (const ArchEntry& e : kArchitectures)
    if (c.arch == e.arch) return e.layer;
  fail("architecture '" + c.arch + "' has no layer definition");
}

int64_t act_width(const ModelConfig& c, Act a) {
  switch (a) {
    case Act::X:
    case Act::XB: return c.dim;
    case Act::Q:
    case Act::Att: return c.q_dim();
    case Act::K:
    case Act::V: return c.kv_dim();
    case Act::Gate:
    case Act::Up: return c.ffn_dim;
  }
  fail("internal: unknown activation");
}

}  // namespace slake
