// libFuzzer target: Jinja templates, parsed and rendered with a chat-like context. Any input must
// render or throw slake::Error (syntax errors, raise_exception, the limits on depth, steps and
// sizes); ASan/UBSan catch everything else, and the limits keep each input fast.
#include <cstdint>
#include <string>

#include "slake/error.h"
#include "slake/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string context = R"({"messages": [{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi ✓"}, {"role": "assistant", "content": " ok ", "tool_calls": [{"type": "function",
    "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]}], "tools": [{"type": "function",
    "function": {"name": "f", "parameters": {"type": "object"}}}], "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>", "n": 3, "x": -0.5})";
  slake::jinja::Limits limits;
  limits.max_depth = 64;
  limits.max_steps = 20000;
  limits.max_output = 1 << 16;
  limits.max_items = 1 << 12;
  limits.max_work_bytes = 1 << 22;
  slake::jinja::RenderOptions opt;
  opt.now = 1721995200;
  try {
    slake::jinja::Template t(std::string(reinterpret_cast<const char*>(data), size), "fuzz", limits);
    t.render(context, opt);
  } catch (const slake::Error&) {
  }
  return 0;
}
