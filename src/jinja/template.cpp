// The public face of the engine (slake/jinja.h): parse once, render many times, every internal
// error turned into a slake::Error that names the template and the line.
#include <ctime>

#include "interpreter.h"
#include "parser.h"
#include "slake/error.h"
#include "slake/jinja.h"

namespace slake::jinja {

namespace {
[[noreturn]] void fail_at(const std::string& name, const RenderError& e) {
  fail(name + (e.line > 0 ? " line " + std::to_string(e.line) : std::string()) + ": " + e.message);
}
}  // namespace

Template::Template(const std::string& source, std::string name, Limits limits)
    : name_(std::move(name)), limits_(limits) {
  try {
    program_ = std::make_unique<Program>(parse(lex(source), limits_.max_depth));
  } catch (const RenderError& e) {
    fail_at(name_, e);
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const std::string& context_json, const RenderOptions& options) const {
  std::tm now{};
  if (options.now >= 0) {
    const std::time_t t = static_cast<std::time_t>(options.now);
    gmtime_r(&t, &now);
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  try {
    auto globals = std::make_shared<Scope>();
    add_globals(*globals);
    const Value ctx = from_json_text(context_json);
    for (const auto& [k, v] : ctx.dict_ref().entries) globals->vars[k.str()] = v;
    Interpreter in(limits_, now);
    return in.render(*program_, std::move(globals));
  } catch (const RenderError& e) {
    fail_at(name_, e);
  }
}

}  // namespace slake::jinja
