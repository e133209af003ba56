// SentencePiece-style tokenization ("llama" vocabularies), as llama.cpp's llm_tokenizer_spm:
// the text starts as one symbol per UTF-8 character; the neighbouring pair whose concatenation is
// the highest-scoring token is merged, again and again (ties: the leftmost pair); what is left is
// emitted as tokens, and a symbol that is no token falls back to one <0xNN> token per byte.
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <string>

#include "tokenizer_internal.h"
#include "unicode_util.h"

namespace slake::detail {

namespace {

constexpr float kNoMerge = -std::numeric_limits<float>::infinity();

// A span of the text, linked to its live neighbours; len 0 once merged into its left neighbour.
struct Symbol {
  int prev, next;
  size_t start, len;
};

struct Bigram {
  int left, right;
  float score;
  size_t len;  // left.len + right.len when queued: a pair whose symbols changed since is stale
};

// Highest score first; equal scores: leftmost first.
struct LowerPriority {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

bool mergeable_type(int32_t type) {
  return type != kTokenUnknown && type != kTokenControl && type != kTokenByte;
}

}  // namespace

SpmEncoder::SpmEncoder(const Vocab& vocab, const TokenIndex& index) : vocab_(vocab), index_(index) {
  const size_t n = vocab.tokens.size();
  merge_score_.assign(n, kNoMerge);
  if (!vocab.scores.empty()) {
    // GGUF: the SentencePiece scores. A NaN would break the queue's ordering: such a piece is
    // never a merge target.
    for (size_t id = 0; id < n; ++id)
      if (mergeable_type(token_type(vocab, static_cast<int32_t>(id))) && !std::isnan(vocab.scores[id]))
        merge_score_[id] = vocab.scores[id];
  } else if (!vocab.merges.empty()) {
    // tokenizer.json (BPE with byte fallback) has merges but no scores. Its merges list every way
    // to split each piece, in the order of the pieces' scores, so merge rank r giving a piece
    // score -r (its first rank) reproduces the order of the original scores.
    for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
      const std::string& m = vocab.merges[rank];
      const size_t space = m.find(' ', 1);
      if (space == std::string::npos) continue;
      const int32_t id = index.find(m.substr(0, space) + m.substr(space + 1));
      if (id >= 0 && mergeable_type(token_type(vocab, id)) && merge_score_[static_cast<size_t>(id)] == kNoMerge)
        merge_score_[static_cast<size_t>(id)] = -static_cast<float>(rank);
    }
  } else {
    // Neither scores nor merges: every piece scores 0 (llama.cpp's default), so the leftmost
    // possible merge always goes first.
    for (size_t id = 0; id < n; ++id)
      if (mergeable_type(token_type(vocab, static_cast<int32_t>(id)))) merge_score_[id] = 0.0f;
  }

  // The unknown token: the file's, else the token typed unknown (llama.cpp assumes id 0 then).
  int32_t unk = vocab.unk;
  for (size_t id = 0; unk < 0 && id < n; ++id)
    if (token_type(vocab, static_cast<int32_t>(id)) == kTokenUnknown) unk = static_cast<int32_t>(id);
  static const char hex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const std::string byte_piece = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = index.find(byte_piece);
    if (id < 0) id = index.find(std::string(1, static_cast<char>(b)));
    if (id < 0) id = unk;  // no byte tokens: the unknown token, or nothing when there is none
    byte_token_[static_cast<size_t>(b)] = id;
  }
}

int32_t SpmEncoder::piece_id(std::string_view text) const {
  const int32_t id = index_.find(text);
  return id >= 0 && mergeable_type(token_type(vocab_, id)) ? id : -1;
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  // One symbol per UTF-8 character; a byte that is not part of a well-formed character is a
  // symbol of its own (no piece contains it, so it ends up as its <0xNN> token).
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::max<size_t>(1, utf8_sequence_length(text, pos));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, pos + len < text.size() ? index + 1 : -1, pos, len});
    pos += len;
  }
  if (symbols.empty()) return;

  std::priority_queue<Bigram, std::vector<Bigram>, LowerPriority> queue;
  auto try_add_bigram = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const size_t len = l.len + symbols[static_cast<size_t>(right)].len;
    const int32_t id = index_.find(text.substr(l.start, len));
    if (id < 0 || merge_score_[static_cast<size_t>(id)] == kNoMerge) return;
    queue.push({left, right, merge_score_[static_cast<size_t>(id)], len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add_bigram(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(b.left)];
    Symbol& right = symbols[static_cast<size_t>(b.right)];
    // Symbols only grow, and only by absorbing their right neighbour: unchanged lengths mean the
    // pair is still the one that was queued.
    if (left.len == 0 || right.len == 0 || left.len + right.len != b.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = b.left;
    try_add_bigram(left.prev, b.left);
    try_add_bigram(b.left, left.next);
  }

  for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const int32_t id = piece_id(text.substr(s.start, s.len));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t k = 0; k < s.len; ++k) {
      const int32_t byte_id = byte_token_[static_cast<unsigned char>(text[s.start + k])];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace slake::detail
