// The state of one generation under a grammar, and the tokens it allows (grammar.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "slake/error.h"
#include "slake/sampler.h"
#include "slake/grammar/grammar.h"
#include "slake/tokenizer/tokenizer.h"

namespace slake {

namespace {
using Element = Grammar::Element;
}

GrammarVocab::GrammarVocab(const Tokenizer& tok, const std::unordered_set<int32_t>& end_tokens)
    : n_vocab_(static_cast<int>(tok.vocab().tokens.size())), end_(end_tokens) {
  pieces_.resize(static_cast<size_t>(n_vocab_));
  std::vector<int32_t> order;
  for (int32_t t = 0; t < n_vocab_; ++t) {
    if (end_.count(t)) continue;
    pieces_[static_cast<size_t>(t)] = tok.token_to_piece(t, false);
    if (!pieces_[static_cast<size_t>(t)].empty()) order.push_back(t);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)] || (pieces_[static_cast<size_t>(a)] == pieces_[static_cast<size_t>(b)] && a < b);
  });
  // Node `at` holds the tokens order[lo, hi), which share their first `depth` bytes.
  nodes.emplace_back();
  struct Job {
    uint32_t at;
    size_t lo, hi, depth;
  };
  std::vector<Job> jobs = {{0, 0, order.size(), 0}};
  while (!jobs.empty()) {
    Job j = jobs.back();
    jobs.pop_back();
    const auto piece = [&](size_t i) -> const std::string& { return pieces_[static_cast<size_t>(order[i])]; };
    while (j.lo < j.hi && piece(j.lo).size() == j.depth) {
      if (nodes[j.at].token < 0) nodes[j.at].token = order[j.lo];
      else same_bytes[nodes[j.at].token].push_back(order[j.lo]);
      ++j.lo;
    }
    std::vector<std::pair<size_t, size_t>> groups;
    for (size_t i = j.lo; i < j.hi;) {
      size_t k = i;
      while (k < j.hi && piece(k)[j.depth] == piece(i)[j.depth]) ++k;
      groups.emplace_back(i, k);
      i = k;
    }
    nodes[j.at].first_child = static_cast<uint32_t>(nodes.size());
    nodes[j.at].n_children = static_cast<uint32_t>(groups.size());
    for (const auto& [lo, hi] : groups) {
      Node n;
      n.byte = static_cast<uint8_t>(piece(lo)[j.depth]);
      nodes.push_back(n);
      jobs.push_back({static_cast<uint32_t>(nodes.size() - 1), lo, hi, j.depth + 1});
    }
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab)
    : g_(std::move(grammar)), vocab_(std::move(vocab)) {
  for (const uint32_t start : g_->rules[g_->root]) expand({start}, state_.stacks, 0);
  std::sort(state_.stacks.begin(), state_.stacks.end());
  state_.stacks.erase(std::unique(state_.stacks.begin(), state_.stacks.end()), state_.stacks.end());
}

// Follows `s` until its top is a character set (or it is empty: the grammar's end), branching at
// each rule reference into its alternatives.
void GrammarMatcher::expand(Stack s, std::vector<Stack>& out, int depth) const {
  // Paths through rules that match nothing can multiply (x{40} with x ::= "" | ""): the work of one
  // step is bounded, and so is the depth of the recursion.
  if (out.size() > 4 * g_->limits.max_stacks)
    fail("grammar: more than " + std::to_string(g_->limits.max_stacks) + " parse stacks at once (too ambiguous)");
  for (;;) {
    if (depth > 2000) fail("grammar: rules nested more than 2000 deep without a character");  // frames of this recursion
    if (s.empty()) {
      out.push_back(std::move(s));
      return;
    }
    const uint32_t pos = s.back();
    const Element& e = g_->elements[pos];
    if (e.kind == Element::kChars) {
      out.push_back(std::move(s));
      return;
    }
    s.pop_back();
    if (e.kind == Element::kEnd) continue;
    if (g_->elements[pos + 1].kind != Element::kEnd) s.push_back(pos + 1);  // a tail call leaves no frame
    const auto& alts = g_->rules[e.value];
    for (size_t i = 0; i + 1 < alts.size(); ++i) {
      Stack t = s;
      t.push_back(alts[i]);
      expand(std::move(t), out, depth + 1);
    }
    s.push_back(alts.back());  // the last alternative in this frame: no deeper
  }
}

void GrammarMatcher::advance(const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& out) const {
  out.clear();
  for (const Stack& s : stacks) {
    if (s.empty() || !g_->sets[g_->elements[s.back()].value].matches(cp)) continue;
    Stack t = s;
    ++t.back();
    expand(std::move(t), out, 0);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.size() > g_->limits.max_stacks)
    fail("grammar: more than " + std::to_string(g_->limits.max_stacks) + " parse stacks at once (too ambiguous)");
}

// The smallest code point a UTF-8 sequence of `len` bytes may encode (shorter forms are overlong).
static uint32_t min_code_point(int len) { return len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000; }

// Whether some code point that begins with the partial sequence of `s` can continue a stack.
bool GrammarMatcher::plausible(const State& s) const {
  const int bits = 6 * s.partial_left;
  const uint32_t lo = std::max(s.partial << bits, min_code_point(s.partial_len));
  const uint32_t hi = std::min((s.partial << bits) | ((1u << bits) - 1), 0x10FFFFu);
  if (lo > hi) return false;
  for (const Stack& st : s.stacks)
    if (!st.empty() && g_->sets[g_->elements[st.back()].value].intersects(lo, hi)) return true;
  return false;
}

// One byte of the text: a whole code point advances the stacks; the start of one is kept, and only
// where well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF) can follow.
bool GrammarMatcher::step_byte(const State& in, uint8_t b, State& out) const {
  if (in.partial_left == 0) {
    if (b < 0x80) {
      advance(in.stacks, b, out.stacks);
      out.partial = 0;
      out.partial_left = out.partial_len = 0;
      return !out.stacks.empty();
    }
    if (b >= 0xC2 && b <= 0xDF) out.partial = b & 0x1Fu, out.partial_len = 2;
    else if (b >= 0xE0 && b <= 0xEF) out.partial = b & 0x0Fu, out.partial_len = 3;
    else if (b >= 0xF0 && b <= 0xF4) out.partial = b & 0x07u, out.partial_len = 4;
    else return false;  // not a UTF-8 lead byte
    out.partial_left = out.partial_len - 1;
    out.stacks = in.stacks;
    return plausible(out);
  }
  if ((b & 0xC0) != 0x80) return false;
  const uint32_t cp = (in.partial << 6) | (b & 0x3Fu);
  if (in.partial_left == 1) {
    if (cp < min_code_point(in.partial_len) || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    advance(in.stacks, cp, out.stacks);
    out.partial = 0;
    out.partial_left = out.partial_len = 0;
    return !out.stacks.empty();
  }
  out.stacks = in.stacks;
  out.partial = cp;
  out.partial_len = in.partial_len;
  out.partial_left = in.partial_left - 1;
  return plausible(out);
}

void GrammarMatcher::walk(uint32_t node, const State& s, std::vector<uint64_t>& bits) const {
  const GrammarVocab::Node& n = vocab_->nodes[node];
  State next;
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const GrammarVocab::Node& child = vocab_->nodes[c];
    if (!step_byte(s, child.byte, next)) continue;
    if (child.token >= 0) {
      bits[static_cast<size_t>(child.token) / 64] |= 1ull << (child.token % 64);
      const auto same = vocab_->same_bytes.find(child.token);
      if (same != vocab_->same_bytes.end())
        for (const int32_t t : same->second) bits[static_cast<size_t>(t) / 64] |= 1ull << (t % 64);
    }
    if (child.n_children) walk(c, next, bits);
  }
}

std::string GrammarMatcher::key(const State& s) const {
  std::string k;
  const auto put = [&](uint32_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(s.partial);
  put(static_cast<uint32_t>(s.partial_left * 8 + s.partial_len));
  for (const Stack& st : s.stacks) {
    put(static_cast<uint32_t>(st.size()));
    for (const uint32_t p : st) put(p);
  }
  return k;
}

const std::vector<uint64_t>& GrammarMatcher::allowed() {
  if (mask_valid_) return mask_;
  const std::string k = key(state_);
  auto it = cache_.find(k);
  if (it == cache_.end()) {
    std::vector<uint64_t> bits((static_cast<size_t>(vocab_->n_vocab()) + 63) / 64, 0);
    walk(0, state_, bits);
    if (cache_.size() >= 4096) cache_.clear();
    it = cache_.emplace(k, std::move(bits)).first;
  }
  mask_ = it->second;
  if (accepting())
    for (int32_t t = 0; t < vocab_->n_vocab(); ++t)
      if (vocab_->is_end(t)) mask_[static_cast<size_t>(t) / 64] |= 1ull << (t % 64);
  mask_valid_ = true;
  return mask_;
}

void GrammarMatcher::apply(float* logits) {
  const std::vector<uint64_t>& m = allowed();
  for (int32_t t = 0; t < vocab_->n_vocab(); ++t)
    if (!(m[static_cast<size_t>(t) / 64] >> (t % 64) & 1)) logits[t] = -std::numeric_limits<float>::infinity();
}

bool GrammarMatcher::accept_text(std::string_view text) {
  State s = state_, next;
  for (const char c : text) {
    if (!step_byte(s, static_cast<uint8_t>(c), next)) return false;
    std::swap(s, next);
  }
  state_ = std::move(s);
  mask_valid_ = false;
  return true;
}

bool GrammarMatcher::accept_token(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  if (vocab_->is_end(token)) return accepting();
  const std::string& b = vocab_->bytes(token);
  return !b.empty() && accept_text(b);
}

bool GrammarMatcher::accepting() const {
  return state_.partial_left == 0 &&
         std::any_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::finished() const {
  return state_.partial_left == 0 &&
         std::all_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

int32_t sample_with_grammar(Sampler& s, GrammarMatcher& m, float* logits, int n_vocab, bool mask_first) {
  // Mirostat learns from every draw: a draw the grammar refuses must not teach it.
  if (!mask_first && s.params().mirostat == 0) {
    const int32_t t = s.sample(logits, n_vocab);
    if (t >= 0 && t < n_vocab && (m.vocab_is_end(t) ? m.accepting() : m.accept_token(t))) return t;
  }
  m.apply(logits);
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  if (std::all_of(logits, logits + n_vocab, [](float l) { return l == kBanned; })) return -1;
  const int32_t t = s.sample(logits, n_vocab);
  if (!m.vocab_is_end(t) && !m.accept_token(t)) fail("grammar: a token drawn from the masked logits left the grammar");
  return t;
}

// llama.cpp's grammars/json.gbnf, with whitespace and numbers bounded as its JSON-schema converter
// bounds them (a model left free to emit spaces or digits can do so until max_tokens).
std::string json_value_gbnf() {
  return R"(root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt/] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]{1,16})? ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))? ws
ws     ::= | " " | "\n" [ \t]{0,20}
)";
}

std::string json_object_gbnf() {
  std::string g = json_value_gbnf();
  g.replace(g.find("root   ::= value"), 16, "root   ::= object");
  return g;
}

}  // namespace slake
