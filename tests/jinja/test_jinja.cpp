// The Jinja engine against Python's jinja2: tests/fixtures/chat_templates/expected.json holds
// what jinja2 3.1.6 renders, with transformers' environment, for small templates (the language:
// whitespace control, loops, macros, filters, Python's spelling of values) and for the real chat
// templates of ../shared/chat-templates over a set of conversations
// (models/make_chat_template_fixtures.py wrote it). Every render must match byte for byte, and
// every template error jinja2 raises must be a slake::Error here too.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "slake/error.h"
#include "slake/jinja.h"
#include "test_util.h"

namespace slake {
namespace {

using nlohmann::ordered_json;

const ordered_json& fixture() {
  static const ordered_json j = [] {
    std::ifstream f(std::string(SLAKE_FIXTURES_DIR) + "/chat_templates/expected.json");
    return ordered_json::parse(f);
  }();
  return j;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Renders one fixture case; "" and the error message when it throws.
std::string render_case(const std::string& source, const ordered_json& context, std::string& error) {
  jinja::RenderOptions opt;
  opt.now = fixture()["now"].get<int64_t>();
  try {
    jinja::Template t(source, "case");
    return t.render(context.dump(), opt);
  } catch (const Error& e) {
    error = e.what();
    return "";
  }
}

void check_case(const std::string& source, const ordered_json& c, const std::string& label) {
  std::string error;
  const std::string got = render_case(source, c["context"], error);
  if (c.contains("expected")) {
    EXPECT_EQ(error, "") << label;
    EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
    return;
  }
  EXPECT_NE(error, "") << label << ": jinja2 fails with: " << c["error"].get<std::string>();
  const std::string kind = c["error_kind"];
  if (kind == "raise_exception") {
    EXPECT_NE(error.find(c["error"].get<std::string>()), std::string::npos) << label << ": " << error;
  }
  if (kind == "syntax") {
    EXPECT_NE(error.find(" line "), std::string::npos) << label << ": " << error;
  }
}

TEST(Jinja, SnippetsMatchJinja2) {
  int n = 0;
  for (const auto& c : fixture()["snippets"]) {
    check_case(c["template"].get<std::string>(), c, "snippet " + std::to_string(n) + ": " + c["template"].get<std::string>());
    ++n;
  }
  EXPECT_GT(n, 40);
}

TEST(Jinja, ChatTemplatesMatchJinja2) {
  const std::string dir = std::string(SLAKE_SHARED_DIR) + "/chat-templates";
  if (!std::ifstream(dir + "/HuggingFaceTB-SmolLM2-135M-Instruct.jinja")) GTEST_SKIP() << "shared material missing: " << dir;
  int n = 0;
  for (const auto& c : fixture()["chat"]) {
    const std::string file = c["file"];
    const std::string source = read_file(dir + "/" + file);
    ASSERT_FALSE(source.empty()) << file;
    check_case(source, c,
               file + " / " + c["conversation"].get<std::string>() +
                   (c["context"]["add_generation_prompt"].get<bool>() ? " + generation prompt" : ""));
    ++n;
  }
  EXPECT_GE(n, 18 * 10);
}

std::string error_of(const std::string& source, const std::string& context = "{}") {
  return test::error_of([&] { jinja::Template(source, "t.jinja").render(context); });
}

TEST(Jinja, ErrorsNameTheTemplateAndLine) {
  EXPECT_EQ(error_of("a\nb\n{{ x | nosuchfilter }}"), "t.jinja line 3: no filter named 'nosuchfilter'");
  EXPECT_EQ(error_of("a\n{% if %}"), "t.jinja line 2: unexpected end of statement block");
  EXPECT_EQ(error_of("{% for x in y %}\n\n"), "t.jinja line 2: unexpected end of template; expected 'else' or 'endfor'");
  EXPECT_EQ(error_of("\n{{ raise_exception('no system role') }}"), "t.jinja line 2: no system role");
  EXPECT_EQ(error_of("{% frobnicate %}"), "t.jinja line 1: unknown tag 'frobnicate'");
  EXPECT_EQ(error_of("{{ x.y }}"), "t.jinja line 1: 'x' is undefined");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"), "t.jinja line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ 'unterminated }}"), "t.jinja line 1: unterminated string");
}

TEST(Jinja, HostileTemplatesEndInErrors) {
  jinja::Limits small;
  small.max_steps = 100000;
  small.max_output = 1 << 20;
  auto err = [&](const std::string& src) {
    return test::error_of([&] { jinja::Template(src, "h", small).render("{}"); });
  };
  EXPECT_NE(err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").find("statements"), std::string::npos);
  EXPECT_NE(err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("deeper than"), std::string::npos);
  EXPECT_NE(err("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("deeper than"), std::string::npos);
  EXPECT_NE(err("{{ " + std::string(3000, '[') + std::string(3000, ']') + " }}").find("deeper than"), std::string::npos);
  EXPECT_NE(err("{% for i in range(10000000000) %}{% endfor %}").find("list of more than"), std::string::npos);
  EXPECT_NE(err("{{ 'x' * 100000000 }}").find("string of more than"), std::string::npos);
  EXPECT_NE(err("{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}").find("output would exceed"), std::string::npos);
  EXPECT_NE(err("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}").find("list of more than"), std::string::npos);
  std::string nested;
  for (int i = 0; i < 400; ++i) nested += "{% if true %}";
  EXPECT_NE(err(nested).find("deeper than"), std::string::npos);
}

}  // namespace
}  // namespace slake
