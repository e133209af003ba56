// The real trained model in ../shared: llama.cpp's GGUF conversion and our own conversions of the
// llama2.c checkpoint (to GGUF and to a Hugging Face directory) give the same logits, and greedy
// decoding from BOS tells the story the model was trained on.
#include <gmock/gmock.h>

#include <cmath>

#include "slake/context.h"
#include "slake/model/llama2c.h"
#include "slake/model/model.h"
#include "slake/tokenizer/vocab.h"
#include "greedy.h"
#include "test_util.h"

namespace slake {
namespace {

std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& toks, int threads) {
  Context ctx(m, test::f32_cache(static_cast<int>(toks.size()), threads, 32));
  std::vector<float> out;
  ctx.eval(toks, &out, true);
  return out;
}

std::string greedy(const Model& m, int n, int threads, std::vector<int32_t>* ids = nullptr) {
  const std::vector<int32_t> picked = test::greedy_ids(m, n, threads);
  if (ids) ids->insert(ids->end(), picked.begin(), picked.end());
  std::string text;
  for (int32_t t : picked) text += token_to_piece(m.vocab, t);
  return text;
}

class Stories : public ::testing::Test {
 protected:
  void SetUp() override {
    SLAKE_STORIES_OR_SKIP(dir);
    llamacpp_ = load_model(dir + "stories260K.gguf");
    convert_llama2c(dir + "stories260K.bin", dir + "tok512.bin", tmp_.file("ours.gguf"), tmp_.path());
    ours_gguf_ = load_model(tmp_.file("ours.gguf"));
    ours_hf_ = load_model(tmp_.path());
    // A prompt: the start of the model's own story plus some other tokens.
    for (int i = 0; i < 96; ++i) prompt_.push_back((i * 37 + 11) % llamacpp_->cfg.n_vocab);
    prompt_[0] = 1;
  }
  test::TempDir tmp_;
  std::unique_ptr<Model> llamacpp_, ours_gguf_, ours_hf_;
  std::vector<int32_t> prompt_;
};

TEST_F(Stories, ConversionsGiveTheSameLogits) {
  const std::vector<float> ref = all_logits(*llamacpp_, prompt_, 2);
  // Same layout, same fp32 weights: bit-identical.
  EXPECT_EQ(all_logits(*ours_gguf_, prompt_, 2), ref);
  // Rotate-half layout: the same math in another summation order.
  const std::vector<float> hf = all_logits(*ours_hf_, prompt_, 2);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(hf[i] - ref[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::abs(ref[i])));
  }
  EXPECT_LE(max_diff, 1e-5 * max_ref);
  // The vocabulary came through: same pieces.
  EXPECT_EQ(ours_gguf_->vocab.tokens, llamacpp_->vocab.tokens);
  EXPECT_EQ(ours_hf_->vocab.tokens, llamacpp_->vocab.tokens);
}

TEST_F(Stories, ThreadCountDoesNotChangeLogits) {
  EXPECT_EQ(all_logits(*llamacpp_, prompt_, 1), all_logits(*llamacpp_, prompt_, 2));
  EXPECT_EQ(all_logits(*llamacpp_, prompt_, 1), all_logits(*llamacpp_, prompt_, 3));
}

TEST_F(Stories, GreedyDecodingTellsTheStory) {
  std::vector<int32_t> a, b, c;
  const std::string text = greedy(*llamacpp_, 60, 2, &a);
  EXPECT_THAT(text, ::testing::StartsWith(" Once upon a time, there was a little girl named Lily."));
  greedy(*ours_gguf_, 60, 1, &b);
  greedy(*ours_hf_, 60, 2, &c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

}  // namespace
}  // namespace slake
