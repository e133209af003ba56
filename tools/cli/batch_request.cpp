#include "batch_request.h"

#include <climits>

#include "slake/error.h"
#include "slake/tokenizer/tokenizer.h"

namespace slake::cli {

namespace {

using nlohmann::json;

int int_field(const json& j, const char* name, int min_value) {
  const json& v = j.at(name);
  if (!v.is_number_integer()) fail("\"" + std::string(name) + "\" must be an integer, got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < min_value || x > INT_MAX)
    fail("\"" + std::string(name) + "\" must be an integer >= " + std::to_string(min_value) + ", got " + v.dump());
  return static_cast<int>(x);
}

bool bool_field(const json& j, const char* name) {
  const json& v = j.at(name);
  if (!v.is_boolean()) fail("\"" + std::string(name) + "\" must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::string utf8_string(const json& v, const std::string& what) {
  if (!v.is_string()) fail(what + " must be a string, got " + v.dump().substr(0, 80));
  std::string s = v.get<std::string>();
  const size_t bad = find_invalid_utf8(s);
  if (bad != std::string::npos) fail(what + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  return s;
}

}  // namespace

BatchRequest parse_batch_request(const json& j, int default_max_new_tokens) {
  if (!j.is_object()) fail("a request must be a JSON object, got " + j.dump().substr(0, 80));
  static const char* const kKnown[] = {"id",   "prompt", "max_new_tokens",  "min_new_tokens",
                                       "chat", "stop",   "truncate_tokens", "echo_prompt"};
  for (const auto& item : j.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || item.key() == k;
    if (!known) fail("unknown field \"" + item.key() + "\"");
  }
  BatchRequest r;
  if (j.contains("id")) r.id = j.at("id");
  if (!j.contains("prompt")) fail("missing field \"prompt\"");
  r.prompt = utf8_string(j.at("prompt"), "\"prompt\"");
  r.max_new_tokens = j.contains("max_new_tokens") ? int_field(j, "max_new_tokens", -1) : default_max_new_tokens;
  if (j.contains("min_new_tokens")) r.min_new_tokens = int_field(j, "min_new_tokens", 0);
  if (j.contains("chat")) r.chat = bool_field(j, "chat");
  if (j.contains("echo_prompt")) r.echo_prompt = bool_field(j, "echo_prompt");
  if (j.contains("truncate_tokens")) {
    r.truncate_tokens = int_field(j, "truncate_tokens", 0);
    // Half of 1 is 0, and keeping the "last 0 tokens" would keep everything.
    if (r.truncate_tokens == 1) fail("\"truncate_tokens\" must be 0 (off) or >= 2, got 1");
  }
  if (j.contains("stop")) {
    const json& s = j.at("stop");
    if (!s.is_array()) fail("\"stop\" must be an array of strings, got " + s.dump().substr(0, 80));
    for (size_t i = 0; i < s.size(); ++i) {
      r.stop.push_back(utf8_string(s[i], "\"stop\"[" + std::to_string(i) + "]"));
      if (r.stop.back().empty()) fail("\"stop\"[" + std::to_string(i) + "] is empty");
    }
  }
  return r;
}

}  // namespace slake::cli
