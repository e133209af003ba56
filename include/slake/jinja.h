// A Jinja template engine for chat templates, rendering as Python's jinja2 does with the
// environment transformers uses for apply_chat_template: ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, and the globals raise_exception and
// strftime_now, and tojson as json.dumps (ensure_ascii=False). Output is meant to match jinja2
// byte for byte: Python's str() and repr() of values, its float spelling, its operators.
//
// Errors (syntax, unknown filters, a raise_exception, an undefined value used where jinja2 fails)
// are slake::Error naming the template and line. So are the limits below, so that no template
// can hang the renderer or take all memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace slake::jinja {

struct Program;

struct Limits {
  int max_depth = 256;                    // nesting of blocks, expressions and macro calls
  int64_t max_steps = 2'000'000;          // statements run and loop iterations, in all
  size_t max_output = 64u << 20;          // bytes of output, and of any one string built
  size_t max_items = 1u << 20;            // elements of any one list built (range(), list + list, ...)
  size_t max_work_bytes = 1024u << 20;    // bytes of strings built by operators and filters, in all
};

struct RenderOptions {
  // strftime_now's time, in seconds since 1970 read as UTC; -1: the current local time (as
  // transformers' datetime.now()).
  int64_t now = -1;
};

class Template {
 public:
  // Parses `source`; throws slake::Error "<name> line N: ..." on a syntax error.
  explicit Template(const std::string& source, std::string name = "template", Limits limits = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the members of `context_json` (a JSON object) as variables: messages, tools,
  // bos_token, add_generation_prompt... Object member order is kept, as Python's dicts keep it.
  std::string render(const std::string& context_json, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  Limits limits_;
  std::unique_ptr<Program> program_;
};

}  // namespace slake::jinja
