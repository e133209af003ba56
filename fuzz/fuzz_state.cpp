// libFuzzer target: state files (slake/state_file.h) through the reader and its checks. The
// fuzzer writes the body (after the magic and version); the checksum is made valid over it, since
// a checksum alone would turn nearly every input away before the reader sees it. The first byte
// picks the context's policy (the full cache, or SLAKE with a recall store). Any input must read
// or throw slake::Error; ASan/UBSan catch everything else. (A file that reads is the server's
// own: slot files live in the --slot-save-path directory.)
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "slake/context.h"
#include "slake/error.h"
#include "slake/model/synthetic_model.h"
#include "slake/state_file.h"

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto model = slake::make_synthetic_model("tiny", slake::DType::F32, 1);
  static slake::Context* contexts[2] = {nullptr, nullptr};
  if (!contexts[0]) {
    slake::ContextParams p;
    p.n_ctx = 64;
    p.n_threads = 1;
    contexts[0] = new slake::Context(*model, p);
    p.kv.policy = "slake";
    p.kv.budget = 16;
    p.kv.window = 4;
    p.kv.recall_pages = 1;
    p.kv.recall_page = 4;
    contexts[1] = new slake::Context(*model, p);
  }
  if (size == 0) return 0;
  const slake::Context& ctx = *contexts[data[0] & 1];
  std::string bytes("SLAKESTA", 8);
  const uint32_t version = slake::kStateFileVersion;
  bytes.append(reinterpret_cast<const char*>(&version), sizeof version);
  bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint64_t sum = fnv1a(bytes);
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  try {
    std::vector<int32_t> tokens;
    slake::read_state_file(bytes, ctx, &tokens);
  } catch (const slake::Error&) {
  }
  return 0;
}
