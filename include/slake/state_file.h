// A context's saved state as a file (slake-server's slot files): the tokens it holds, its size,
// chunk size and KV policy, and every part of its cache and evictor (the exact rows whatever their
// type, KIVI groups, linear states, recall stores, attention sums), in a versioned format that
// ends with a checksum and names the model it was made with.
//
//   "SLAKESTA" | version u32 | model fingerprint u64 | n_ctx i32 | n_batch i32 | policy | tokens |
//   n_past i32 | cache | evictor | FNV-1a 64 of everything before it
//
// Numbers are this machine's bytes: a file is read where it was written (the same build).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slake/context.h"

namespace slake {

constexpr uint32_t kStateFileVersion = 4;

// Identifies a model's weights and vocabulary: a hash of every tensor's name, type, shape and a
// sample of its bytes, and of the vocabulary.
uint64_t model_fingerprint(const Model& m);

std::string write_state_file(const ContextState& s, const std::vector<int32_t>& tokens, uint64_t model);

struct StateFileHead {
  uint64_t model = 0;
  int n_ctx = 0, n_batch = 0;
  KvPolicyParams params;
  std::vector<int32_t> tokens;
};

// The head of a file, its magic, version and checksum verified. Throws slake::Error.
StateFileHead read_state_head(const std::string& bytes);

// The whole state, for a context of `ctx`'s model, size, policy and chunk size (the head's: a
// file of another shape is refused), with the tokens it holds. Throws slake::Error.
std::shared_ptr<const ContextState> read_state_file(const std::string& bytes, const Context& ctx, std::vector<int32_t>* tokens);

}  // namespace slake
