// Byte-level BPE tokenization ("gpt2" vocabularies: GPT-2, Llama 3), as llama.cpp's
// llm_tokenizer_bpe: the pre-tokenizer regex cuts the text into words; each byte of a word starts
// as one symbol (a character of GPT-2's byte alphabet); the neighbouring pair with the lowest merge
// rank is merged, again and again (ties: the leftmost pair); the symbols left are the tokens.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <queue>
#include <string>

#include "pretokenizer.h"
#include "slake/error.h"
#include "tokenizer_internal.h"
#include "unicode_util.h"

namespace slake::detail {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  return pcre2_get_error_message(code, buf, sizeof(buf)) < 0 ? "error " + std::to_string(code)
                                                             : reinterpret_cast<const char*>(buf);
}

// The pattern with every \s written \p{White_Space} and every \S written \P{White_Space}.
std::string with_white_space_property(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char escaped = pattern[++i];  // an escape is two characters: "\\s" is a backslash, then 's'
    if (escaped == 's') out += "\\p{White_Space}";
    else if (escaped == 'S') out += "\\P{White_Space}";
    else out.append({'\\', escaped});
  }
  return out;
}

}  // namespace

// A compiled pre-tokenizer pattern. UTF + UCP: \p{L}, \p{N} and \s follow Unicode properties.
// MATCH_INVALID_UTF: invalid UTF-8 in the subject is allowed and never matches anything.
class BpeEncoder::Regex {
 public:
  explicit Regex(const std::string& pattern) {
    // PCRE2's \s also matches U+180E, which Unicode no longer counts as white space (Hugging Face's
    // tokenizers and Python's regex do not match it), so \s is spelled as the White_Space property;
    // a PCRE2 older than 10.40 does not know that property and gets the pattern as written.
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code_ = compile(with_white_space_property(pattern), &error, &error_offset);
    if (!code_) code_ = compile(pattern, &error, &error_offset);
    if (!code_)
      fail("pre-tokenizer regex does not compile at offset " + std::to_string(error_offset) + ": " + pcre2_message(error));
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // when JIT is unavailable, matching interprets
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls emit(begin, end) for every word, in order: each match, and each run of bytes that no
  // match covers. With these patterns every valid character matches some alternative, so such runs
  // are invalid UTF-8; they become words of their own and are tokenized as raw bytes.
  template <class Emit>
  void split(std::string_view text, Emit&& emit) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    if (!match) throw std::bad_alloc();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0, uncovered = 0;  // uncovered: the first byte no match has covered yet
    while (offset < text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), offset, 0, match.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
        rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_JIT, match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) fail("pre-tokenizer regex failed on the text: " + pcre2_message(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
      const size_t begin = ovector[0], end = ovector[1];
      if (end <= begin) {  // an empty match (none of these patterns has one): step over a character
        offset = begin + std::max<size_t>(1, utf8_sequence_length(text, begin));
        continue;
      }
      if (begin > uncovered) emit(uncovered, begin);
      emit(begin, end);
      offset = uncovered = end;
    }
    if (uncovered < text.size()) emit(uncovered, text.size());
  }

 private:
  static pcre2_code* compile(const std::string& pattern, int* error, PCRE2_SIZE* error_offset) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, error, error_offset, nullptr);
  }

  pcre2_code* code_ = nullptr;
};

BpeEncoder::BpeEncoder(const Vocab& vocab, const TokenIndex& index) : vocab_(vocab), index_(index) {
  const PreTokenizer* pre = find_pretokenizer(vocab.pre);
  if (!pre) fail("pre-tokenizer '" + vocab.pre + "' is not supported (" + known_pretokenizer_names() + " are)");
  for (const char* pattern : pre->patterns)
    if (pattern) regexes_.push_back(std::make_unique<Regex>(pattern));
  ignore_merges_ = pre->ignore_merges;

  if (vocab.merges.size() > static_cast<size_t>(INT32_MAX)) fail("too many merges");
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    // "left right", split at the first space after the first character (llama.cpp's rule). The
    // first merge of a pair wins.
    const std::string_view m = vocab.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string_view::npos) continue;
    const int32_t left = index.find(m.substr(0, space)), right = index.find(m.substr(space + 1));
    if (left < 0 || right < 0) continue;
    const int32_t result = index.find(std::string(m.substr(0, space)) + std::string(m.substr(space + 1)));
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), result});
  }
  for (int b = 0; b < 256; ++b) byte_token_[static_cast<size_t>(b)] = index.find(byte_to_gpt2_char(static_cast<uint8_t>(b)));
}

BpeEncoder::~BpeEncoder() = default;

const BpeEncoder::Merge* BpeEncoder::find_merge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  const auto it = merges_.find(key);
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  split(text, [&](std::string_view word) { encode_word(word, out); });
}

void BpeEncoder::split(std::string_view text, const std::function<void(std::string_view)>& word) const {
  split_from(0, text, word);
}

void BpeEncoder::split_from(size_t level, std::string_view piece, const std::function<void(std::string_view)>& word) const {
  if (level == regexes_.size()) return word(piece);
  regexes_[level]->split(piece, [&](size_t begin, size_t end) { split_from(level + 1, piece.substr(begin, end - begin), word); });
}

namespace {

// A span of the word's bytes, linked to its live neighbours; len 0 once merged into its left one.
struct Symbol {
  int prev, next;
  size_t len;
  int32_t id;  // the token the span is, -1 when none
};

struct Pair {
  int left, right;
  int32_t rank, result;
  size_t left_len, right_len;  // when queued: a pair whose symbols changed since is stale
};

// Lowest rank first; equal ranks: leftmost first.
struct LowerPriority {
  bool operator()(const Pair& a, const Pair& b) const { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); }
};

}  // namespace

void BpeEncoder::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    std::string encoded;
    for (char c : word) encoded += byte_to_gpt2_char(static_cast<uint8_t>(c));
    if (const int32_t id = index_.find(encoded); id >= 0) {
      out.push_back(id);
      return;
    }
  }

  const int n = static_cast<int>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (int i = 0; i < n; ++i) {
    const int32_t byte_id = byte_token_[static_cast<uint8_t>(word[static_cast<size_t>(i)])];
    symbols[static_cast<size_t>(i)] = {i - 1, i + 1 < n ? i + 1 : -1, 1, byte_id};
  }

  std::priority_queue<Pair, std::vector<Pair>, LowerPriority> queue;
  auto try_add_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    if (const Merge* m = find_merge(l.id, r.id)) queue.push({left, right, m->rank, m->result, l.len, r.len});
  };
  for (int i = 1; i < n; ++i) try_add_pair(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(p.left)];
    Symbol& right = symbols[static_cast<size_t>(p.right)];
    // Symbols only grow, and only by absorbing their right neighbour: unchanged lengths mean the
    // pair is still the one that was queued.
    if (left.len != p.left_len || right.len != p.right_len) continue;
    left.len += right.len;
    left.id = p.result;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = p.left;
    try_add_pair(left.prev, p.left);
    try_add_pair(p.left, left.next);
  }

  // A live symbol keeps the position of the byte it started from: symbol i spans word[i, i + len).
  for (int i = n > 0 ? 0 : -1; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      // A merge whose result is missing from the vocabulary, or a byte without a token: one token
      // per byte, the unknown token for bytes that have none.
      for (size_t k = 0; k < s.len; ++k) {
        const int32_t id = byte_token_[static_cast<uint8_t>(word[static_cast<size_t>(i) + k])];
        if (id >= 0) out.push_back(id);
        else if (vocab_.unk >= 0) out.push_back(vocab_.unk);
      }
    }
  }
}

}  // namespace slake::detail
