#include "reasoning.h"

#include <algorithm>

#include "slake/error.h"

namespace slake::server {

namespace {

const std::string kOpen = "<think>", kClose = "</think>";

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  return 0;
}

}  // namespace

ReasoningFormat reasoning_format_from_name(const std::string& name) {
  if (name == "none") return ReasoningFormat::None;
  if (name == "deepseek") return ReasoningFormat::DeepSeek;
  if (name == "auto") return ReasoningFormat::Auto;
  fail("reasoning format '" + name + "': none, deepseek or auto");
}

std::pair<std::string, std::string> ReasoningSplitter::push(const std::string& text) {
  held_ += text;
  std::string reasoning, content;
  for (;;) {
    if (state_ == State::Before) {
      const size_t start = held_.find_first_not_of(" \t\r\n");
      if (start == std::string::npos) return {reasoning, content};  // only spaces so far
      const std::string rest = held_.substr(start);
      if (rest.compare(0, kOpen.size(), kOpen) == 0) {
        held_ = rest.substr(kOpen.size());
        state_ = State::Inside;
        continue;
      }
      if (kOpen.compare(0, rest.size(), rest) == 0) return {reasoning, content};  // "<thi": wait
      state_ = State::After;
      continue;
    }
    if (state_ == State::Inside) {
      const size_t end = held_.find(kClose);
      if (end == std::string::npos) {
        const size_t keep = partial_tag(held_, kClose);
        reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return {reasoning, content};
      }
      reasoning += held_.substr(0, end);
      held_.erase(0, end + kClose.size());
      state_ = State::After;
      skip_newlines_ = true;  // the answer starts after the blank lines that follow </think>
      continue;
    }
    if (skip_newlines_) {
      const size_t start = held_.find_first_not_of("\r\n");
      held_.erase(0, start == std::string::npos ? held_.size() : start);
      skip_newlines_ = held_.empty();
    }
    content += held_;
    held_.clear();
    return {reasoning, content};
  }
}

std::pair<std::string, std::string> ReasoningSplitter::flush() {
  std::pair<std::string, std::string> out;
  (state_ == State::Inside ? out.first : out.second) = held_;
  held_.clear();
  return out;
}

bool prompt_opens_thinking(const std::string& prompt) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  if (end == std::string::npos || end + 1 < kOpen.size()) return false;
  return prompt.compare(end + 1 - kOpen.size(), kOpen.size(), kOpen) == 0;
}

}  // namespace slake::server
