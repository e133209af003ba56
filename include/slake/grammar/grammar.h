// Grammars that constrain generation, in llama.cpp's GBNF:
//
//   root   ::= "{" ws pair ("," ws pair)* "}"      # rules: name ::= alternatives
//   pair   ::= [a-z]+ ":" ws ( num | "null" )      # "literal", [class], [^negated], ., (group)
//   num    ::= "-"? [0-9]{1,6}                      # postfix *, +, ?, {m}, {m,}, {m,n}
//   ws     ::= [ \t\n]*                             # escapes \n \t \r \\ \" \] \xHH \uHHHH \UHHHHHHHH
//
// A Grammar is the parsed, checked form: every rule defined, none left-recursive (the matcher would
// never end), every rule able to match something. Repetitions become helper rules, as in
// llama.cpp (x* is r ::= x r | "", with the tail call not growing the stack).
//
// A GrammarMatcher follows one generation: the set of parse stacks after the text so far (a
// pushdown automaton over code points, non-deterministic, as llama.cpp's llama_grammar), and any
// partial UTF-8 sequence a token ended inside. Tokens are checked against it through a trie of the
// vocabulary's token bytes (GrammarVocab), so tokens sharing a prefix share its work, and the mask
// of a state seen before is taken from a cache (inside a JSON string, say, the state repeats).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace slake {

class Tokenizer;
class Sampler;

struct GrammarLimits {
  size_t max_text_bytes = 1u << 20;   // the GBNF source
  size_t max_elements = 1u << 20;     // after repetitions are expanded
  int max_nesting = 64;               // parentheses within parentheses
  size_t max_stacks = 4096;           // parse stacks alive at once (an ambiguous grammar's blow-up)
};

class Grammar {
 public:
  // Parses and checks GBNF text whose start rule is `root`. Throws slake::Error that says what and
  // where (line:column), for a syntax error, an undefined rule, left recursion, a rule that cannot
  // match anything, or a grammar past the limits.
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, const std::string& root = "root",
                                              const GrammarLimits& limits = {});

  struct Element {
    enum Kind : uint8_t { kEnd, kRef, kChars } kind;
    uint32_t value;  // kRef: the rule; kChars: the character set
  };
  struct CharSet {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
    bool negated = false;
    bool matches(uint32_t cp) const;
    // Whether some code point in [lo, hi] matches.
    bool intersects(uint32_t lo, uint32_t hi) const;
  };

  std::vector<Element> elements;               // each alternative's elements, then kEnd
  std::vector<std::vector<uint32_t>> rules;    // a rule's alternatives: where each starts in `elements`
  std::vector<std::string> rule_names;
  std::vector<CharSet> sets;
  uint32_t root = 0;
  GrammarLimits limits;
};

// The vocabulary as the matcher sees it: each token's bytes (its piece), in a trie. Tokens whose
// piece is empty (control tokens) never match; `end_tokens` end the generation and are allowed
// only when the text so far is a whole match.
class GrammarVocab {
 public:
  GrammarVocab(const Tokenizer& tok, const std::unordered_set<int32_t>& end_tokens);
  int n_vocab() const { return n_vocab_; }
  const std::string& bytes(int32_t token) const { return pieces_[static_cast<size_t>(token)]; }
  bool is_end(int32_t token) const { return end_.count(token) != 0; }

  struct Node {
    uint32_t first_child = 0, n_children = 0;
    int32_t token = -1;  // the token whose bytes end here, or -1 (duplicates: see `same_bytes`)
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;                                    // nodes[0]: the root
  std::unordered_map<int32_t, std::vector<int32_t>> same_bytes;  // a node's token -> others with its bytes

 private:
  int n_vocab_;
  std::vector<std::string> pieces_;
  std::unordered_set<int32_t> end_;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab);

  // One bit per token (bit t of word t / 64): the tokens that keep the text inside the grammar.
  const std::vector<uint64_t>& allowed();
  // Sets the logits of the tokens not allowed to -inf.
  void apply(float* logits);
  // Advances over a token; false (and no change) if it does not continue the grammar.
  bool accept_token(int32_t token);
  // Advances over raw text (tests, and text forced into the reply); false (no change) if it leaves the grammar.
  bool accept_text(std::string_view text);
  // Whether the text so far is a whole match of the grammar.
  bool accepting() const;
  // Whether nothing can follow the text so far (only the end).
  bool finished() const;
  // Whether `token` ends the generation (allowed only where accepting()).
  bool vocab_is_end(int32_t token) const { return vocab_->is_end(token); }

  using Stack = std::vector<uint32_t>;  // element positions; the top is a kChars element

 private:
  struct State {
    std::vector<Stack> stacks;  // sorted, unique
    uint32_t partial = 0;       // the bits of a code point begun by a token's last bytes
    int partial_left = 0;       // its continuation bytes still to come
    int partial_len = 0;        // its length in bytes
  };
  bool step_byte(const State& in, uint8_t byte, State& out) const;
  void advance(const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& out) const;
  void expand(Stack s, std::vector<Stack>& out, int depth) const;
  bool plausible(const State& s) const;
  std::string key(const State& s) const;
  void walk(uint32_t node, const State& s, std::vector<uint64_t>& bits) const;

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const GrammarVocab> vocab_;
  State state_;
  std::vector<uint64_t> mask_;
  bool mask_valid_ = false;
  std::unordered_map<std::string, std::vector<uint64_t>> cache_;
};

// Draws the next token under a grammar and advances `m` over it (not over an end token), in
// llama.cpp's order (common_sampler_sample): a draw from the unconstrained chain is kept when the
// grammar takes it, and only otherwise are the logits masked and the draw made again. A greedy
// draw is then the argmax of the masked logits, at the cost of one token's check instead of a
// mask. `mask_first` masks before the first draw (when the logits are reported, say). `logits` may
// be changed. Returns -1 when no token continues the text (nor ends it). The sampler does not
// record the token (Sampler::accept).
int32_t sample_with_grammar(Sampler& s, GrammarMatcher& m, float* logits, int n_vocab, bool mask_first = false);

// GBNF that matches any JSON value, and any JSON object (OpenAI's {"type": "json_object"}).
std::string json_value_gbnf();
std::string json_object_gbnf();

// GBNF for the JSON texts a JSON Schema (given as JSON text) describes, with bounded whitespace.
// Converted: type (one or a list), properties in the schema's order with required ones always
// present, additionalProperties (absent or false: no others), enum, const, anyOf / oneOf,
// $ref to #, #/$defs/NAME or #/definitions/NAME (recursion included), items, prefixItems,
// minItems / maxItems, minLength / maxLength, format date, time, date-time and uuid, pattern (an
// ECMAScript regular expression, src/grammar/regex_gbnf.h), integer minimum / maximum (exclusive
// too). Any other keyword that constrains (multipleOf, allOf, not, ...) throws slake::Error naming
// it, as does a schema that is not valid JSON or a pattern a grammar cannot express.
std::string json_schema_to_gbnf(const std::string& schema_json);

}  // namespace slake
