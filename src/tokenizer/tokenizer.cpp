// What both tokenizers share: checking the vocabulary, cutting special tokens out of the text,
// BOS, the SentencePiece space prefix, and the way back from ids to text.
#include "slake/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "slake/error.h"
#include "slake/tokenizer/vocab.h"
#include "tokenizer_internal.h"
#include "unicode_util.h"

namespace slake {

namespace detail {

TokenIndex::TokenIndex(const Vocab& v) {
  ids_.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (!v.tokens[id].empty()) ids_.emplace(v.tokens[id], static_cast<int32_t>(id));
}

}  // namespace detail

namespace {

using detail::token_type;

// A stretch of the input: text still to tokenize, or a special token found in it.
struct Fragment {
  size_t offset, length;
  int32_t token;  // -1: the text input[offset, offset + length)
};

void check_vocab(const Vocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) fail("the vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) fail("the vocabulary has too many tokens");
  if (!v.scores.empty() && v.scores.size() != n)
    fail("the vocabulary has " + std::to_string(v.scores.size()) + " scores for " + std::to_string(n) + " tokens");
  if (!v.types.empty() && v.types.size() != n)
    fail("the vocabulary has " + std::to_string(v.types.size()) + " token types for " + std::to_string(n) + " tokens");
  const std::pair<const char*, int> ids[] = {{"BOS", v.bos}, {"EOS", v.eos}, {"unknown", v.unk}, {"EOT", v.eot}};
  for (const auto& [what, id] : ids)
    if (id < -1 || id >= static_cast<int64_t>(n))
      fail(std::string(what) + " token id " + std::to_string(id) + " is outside the vocabulary");
}

}  // namespace

struct Tokenizer::Impl {
  explicit Impl(Vocab v) : vocab(std::move(v)), index(vocab) {}

  std::vector<Fragment> split_special(const std::string& text, bool parse_special) const;

  Vocab vocab;
  detail::TokenIndex index;  // views vocab's strings: Impl never moves (it lives behind a pointer)
  std::unique_ptr<detail::SpmEncoder> spm;
  std::unique_ptr<detail::BpeEncoder> bpe;
  std::vector<std::string> pieces;          // token_to_piece(id, special = false)
  std::vector<std::string> special_pieces;  // token_to_piece(id, special = true)
  // Tokens whose text is matched in the input before tokenizing, longest text first: control and
  // unknown tokens with parse_special, user-defined tokens always.
  std::vector<int32_t> special_tokens;
};

// llama.cpp's tokenizer_st_partition: special tokens in order of decreasing length, each one taking
// every non-overlapping occurrence (left to right) in the text that longer ones have left.
std::vector<Fragment> Tokenizer::Impl::split_special(const std::string& text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (const int32_t id : special_tokens) {
    if (!parse_special && token_type(vocab, id) != detail::kTokenUserDefined) continue;
    const std::string& special = vocab.tokens[static_cast<size_t>(id)];
    next.clear();
    bool found = false;
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view region(text.data(), f.offset + f.length);
      size_t pos = f.offset;
      for (size_t match; (match = region.find(special, pos)) != std::string_view::npos; pos = match + special.size()) {
        found = true;
        if (match > pos) next.push_back({pos, match - pos, -1});
        next.push_back({match, special.size(), id});
      }
      if (pos < region.size()) next.push_back({pos, region.size() - pos, -1});
    }
    if (found) fragments.swap(next);
  }
  return fragments;
}

Tokenizer::Tokenizer(Vocab vocab) {
  check_vocab(vocab);
  impl_ = std::make_unique<Impl>(std::move(vocab));
  const Vocab& v = impl_->vocab;
  if (v.model == "llama") impl_->spm = std::make_unique<detail::SpmEncoder>(v, impl_->index);
  else if (v.model == "gpt2") impl_->bpe = std::make_unique<detail::BpeEncoder>(v, impl_->index);
  else fail("tokenizer model '" + v.model + "' is not supported (llama, gpt2 are)");

  const size_t n = v.tokens.size();
  impl_->pieces.reserve(n);
  impl_->special_pieces.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const int32_t token = static_cast<int32_t>(id);
    impl_->pieces.push_back(slake::token_to_piece(v, token, false));
    impl_->special_pieces.push_back(slake::token_to_piece(v, token, true));
    const int32_t type = token_type(v, token);
    const bool special = type == detail::kTokenControl || type == detail::kTokenUnknown || type == detail::kTokenUserDefined;
    if (special && !v.tokens[id].empty()) impl_->special_tokens.push_back(token);
  }
  std::stable_sort(impl_->special_tokens.begin(), impl_->special_tokens.end(), [&](int32_t a, int32_t b) {
    return v.tokens[static_cast<size_t>(a)].size() > v.tokens[static_cast<size_t>(b)].size();
  });
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

const Vocab& Tokenizer::vocab() const { return impl_->vocab; }
int Tokenizer::n_tokens() const { return static_cast<int>(impl_->vocab.tokens.size()); }

std::vector<int32_t> Tokenizer::tokenize(const std::string& text, bool add_bos, bool parse_special) const {
  const Impl& m = *impl_;
  // The encoders index symbols with int.
  if (text.size() >= static_cast<size_t>(INT32_MAX))
    fail("a text of " + std::to_string(text.size()) + " bytes is too long to tokenize");
  std::vector<int32_t> out;
  if (add_bos && m.vocab.bos >= 0) out.push_back(m.vocab.bos);
  // SentencePiece puts a space before the text, and llama.cpp again before the text that follows
  // each special token, so that "<s>Hello" tokenizes "Hello" as "▁Hello", as at the start.
  bool after_special = true;
  std::string escaped;
  for (const Fragment& f : m.split_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view part(text.data() + f.offset, f.length);
    if (m.spm) {
      static const std::string kSpace = "\xE2\x96\x81";  // spaces are '▁' (U+2581) in SentencePiece
      escaped.clear();
      if (m.vocab.add_space_prefix && after_special) escaped = kSpace;
      for (char c : part) {
        if (c == ' ') escaped += kSpace;
        else escaped += c;
      }
      m.spm->encode(escaped, out);
    } else {
      m.bpe->encode(part, out);
    }
    after_special = false;
  }
  return out;
}

const std::string& Tokenizer::token_to_piece(int32_t token, bool special) const {
  static const std::string kNone;
  const std::vector<std::string>& pieces = special ? impl_->special_pieces : impl_->pieces;
  return token >= 0 && static_cast<size_t>(token) < pieces.size() ? pieces[static_cast<size_t>(token)] : kNone;
}

std::string Tokenizer::detokenize(const std::vector<int32_t>& tokens, bool special) const {
  std::string out;
  // The space that tokenize() put before the text: removed from the first token's piece, whatever
  // that token is (llama.cpp's remove_space, reset after the first token).
  bool remove_space = impl_->spm && impl_->vocab.add_space_prefix;
  for (const int32_t t : tokens) {
    const std::string& piece = token_to_piece(t, special);
    out.append(piece, remove_space && !piece.empty() && piece[0] == ' ' ? 1 : 0, std::string::npos);
    remove_space = false;
  }
  return out;
}

std::string StreamingDetokenizer::push(int32_t token) {
  pending_ += tokenizer_.token_to_piece(token, special_);
  const size_t complete = pending_.size() - detail::utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDetokenizer::flush() { return std::exchange(pending_, std::string()); }

size_t find_invalid_utf8(const std::string& text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = detail::utf8_sequence_length(text, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return std::string::npos;
}

}  // namespace slake
