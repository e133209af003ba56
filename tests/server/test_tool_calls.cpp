// ToolCallStream (tool_calls.h) against parse_tool_calls over the whole reply: replies of every
// call syntax (calls alone, several, with text around them, unknown functions, arguments before
// the name, braces and quotes inside strings, cut-off markers), fed whole, a character at a time
// and in random pieces, add up to the same content and the same calls (names, and arguments
// equal as JSON values); a call whose name comes first streams its arguments in parts.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "../../tools/server/tool_calls.h"

namespace slake::server {
namespace {

struct Streamed {
  std::string content;
  std::map<int, std::pair<std::string, std::string>> calls;  // index -> name, arguments
  int argument_parts = 0;
};

Streamed stream(const ToolRequest& req, const std::vector<std::string>& pieces) {
  ToolCallStream s(req);
  Streamed out;
  const auto take = [&](const std::vector<ToolStreamEvent>& events) {
    for (const ToolStreamEvent& e : events) {
      if (e.kind == ToolStreamEvent::Content) {
        EXPECT_FALSE(e.text.empty());
        out.content += e.text;
      } else if (e.kind == ToolStreamEvent::CallStart) {
        EXPECT_EQ(out.calls.count(e.index), 0u) << "call " << e.index << " begun twice";
        EXPECT_EQ(e.id.size(), 9u);
        out.calls[e.index].first = e.name;
      } else {
        EXPECT_EQ(out.calls.count(e.index), 1u) << "arguments before their call";
        out.calls[e.index].second += e.text;
        ++out.argument_parts;
      }
    }
  };
  for (const std::string& p : pieces) take(s.push(p));
  take(s.finish());
  EXPECT_EQ(s.calls(), static_cast<int>(out.calls.size()));
  return out;
}

void expect_same(const ToolRequest& req, const std::string& text, const std::vector<std::string>& pieces) {
  const ParsedReply want = parse_tool_calls(text, req);
  const Streamed got = stream(req, pieces);
  EXPECT_EQ(got.content, want.content);
  ASSERT_EQ(got.calls.size(), want.calls.size());
  for (size_t i = 0; i < want.calls.size(); ++i) {
    const auto& [name, args] = got.calls.at(static_cast<int>(i));
    EXPECT_EQ(name, want.calls[i].name);
    EXPECT_EQ(nlohmann::json::parse(args, nullptr, false), nlohmann::json::parse(want.calls[i].arguments)) << args;
  }
}

ToolRequest request(ToolFormat f) {
  ToolRequest r;
  r.tools_json = "[]";
  r.names = {"get_weather", "add"};
  r.format = f;
  return r;
}

const std::map<ToolFormat, std::vector<std::string>> kReplies = {
    {ToolFormat::Hermes,
     {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"a}\\\"b{\", \"unit\": \"celsius\"}}\n</tool_call>",
      "Let me check.\n<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": {\"x\": [1, {}]}, \"b\": 2}}</tool_call>\n Done. ",
      "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call> and text",
      "<tool_call>{\"arguments\": {\"a\": 1, \"b\": 2}, \"name\": \"add\"}</tool_call>",
      "  Just text, with a <tool but no call  ", "Text ending in a marker's start <tool_c", "",
      "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>"}},
    {ToolFormat::Mistral,
     {"[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"X]\", \"unit\": \"celsius\"}}]",
      "Sure. [TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}] after",
      "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]", "[TOOL_CALLS] not a list", "plain [TOOL_CAL",
      "[TOOL_CALLS][{\"arguments\": {\"a\": 1, \"b\": 2}, \"name\": \"add\"}]",
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"unknown\", \"arguments\": {}}] tail",
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}{\"name\": \"add\", \"arguments\": {\"a\": 3}}]",
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"get_w"}},
    {ToolFormat::Llama3,
     {"{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
      "The answer is {not a call}", "  {\"name\": \"add\", \"parameters\": {\"a\": 1}} trailing text",
      "{\"name\": \"add\", \"arguments\": {\"a\": 1}}", "<|python_ta"}},
    {ToolFormat::Generic,
     {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"{Rome}\", \"unit\": \"fahrenheit\"}}",
      "{\"arguments\": {\"a\": 1, \"b\": 2}, \"name\": \"add\"}", "{\"name\": \"add\", \"arguments\": 5}", "no call here"}},
};

TEST(ToolCallStream, AddsUpToTheWholeReplysCalls) {
  std::mt19937 rng(9);
  for (const auto& [format, replies] : kReplies) {
    const ToolRequest req = request(format);
    for (const std::string& text : replies) {
      SCOPED_TRACE(std::string(tool_format_name(format)) + ": " + text);
      expect_same(req, text, {text});
      std::vector<std::string> chars;
      for (const char c : text) chars.emplace_back(1, c);
      expect_same(req, text, chars);
      for (int round = 0; round < 20; ++round) {
        std::vector<std::string> pieces;
        for (size_t at = 0; at < text.size();) {
          const size_t n = 1 + rng() % 7;
          pieces.push_back(text.substr(at, n));
          at += n;
        }
        expect_same(req, text, pieces);
      }
    }
  }
}

TEST(ToolCallStream, ACallStreamsAsItIsWritten) {
  const ToolRequest req = request(ToolFormat::Hermes);
  const std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
  ToolCallStream s(req);
  size_t begun_at = std::string::npos;
  int parts = 0;
  for (size_t i = 0; i < text.size(); ++i)
    for (const ToolStreamEvent& e : s.push(text.substr(i, 1))) {
      if (e.kind == ToolStreamEvent::CallStart) begun_at = i;
      if (e.kind == ToolStreamEvent::CallArguments) ++parts;
    }
  // The id and name as soon as the arguments open; then every character of them as it comes.
  EXPECT_EQ(begun_at, text.find("{\"city\""));
  EXPECT_EQ(parts, static_cast<int>(std::string("{\"city\": \"Paris\", \"unit\": \"celsius\"}").size()));
  EXPECT_TRUE(s.finish().empty());
  EXPECT_EQ(s.calls(), 1);
}

}  // namespace
}  // namespace slake::server
