// One decode step of several device contexts together (DeviceContext::decode_batch): the device's
// counterpart of the CPU's decode_batch (src/batch_decode.cpp). A decode step of one sequence
// reads every weight for one row; stepping a server's slots together reads them once for all.
#include <algorithm>
#include <set>
#include <string>

#include "cuda/device_context.h"
#include "device_memory.h"
#include "slake/error.h"

namespace slake::gpu {

namespace {

void check_batch(const std::vector<DeviceContext*>& ctxs, const std::vector<int32_t>& tokens) {
  if (ctxs.empty()) fail("decode_batch: no sequences");
  if (ctxs.size() != tokens.size())
    fail("decode_batch: " + std::to_string(ctxs.size()) + " contexts but " + std::to_string(tokens.size()) + " tokens");
  std::set<const DeviceContext*> seen;
  for (size_t i = 0; i < ctxs.size(); ++i) {
    const DeviceContext* c = ctxs[i];
    if (!c) fail("decode_batch: context " + std::to_string(i) + " is null");
    if (!seen.insert(c).second) fail("decode_batch: context " + std::to_string(i) + " appears twice");
    if (const char* why = c->batch_refusal(*ctxs[0])) fail("decode_batch: context " + std::to_string(i) + " " + why);
    check_eval_tokens(c->model().cfg, {tokens[i]}, c->n_past(), c->n_ctx());
  }
}

}  // namespace

const char* DeviceContext::batch_refusal(const DeviceContext& lead) const {
  if (&model_ != &lead.model_ || shared_ == nullptr || shared_ != lead.shared_) return "does not share the first one's model and device weights";
  if (n_ctx() != lead.n_ctx()) return "has another context size than the first";
  if (n_past_ == 0) return "holds no prompt yet";
  return nullptr;
}

void DeviceContext::decode_batch(const std::vector<DeviceContext*>& ctxs, const std::vector<int32_t>& tokens,
                                 std::vector<std::vector<float>>* logits) {
  check_batch(ctxs, tokens);
  const ModelConfig& c = ctxs[0]->model_.cfg;
  const int n = static_cast<int>(ctxs.size());
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  if (logits) logits->assign(ctxs.size(), {});
  // Groups of at most n_batch rows, each in the activations of its first context (the lead).
  for (int g0 = 0, nb = 0; g0 < n; g0 += nb) {
    DeviceContext& lead = *ctxs[static_cast<size_t>(g0)];
    nb = std::min(lead.plan_.n_batch, n - g0);
    std::vector<DeviceContext*> group(ctxs.begin() + g0, ctxs.begin() + g0 + nb);
    std::vector<int32_t> pos(static_cast<size_t>(nb));
    for (int i = 0; i < nb; ++i) pos[static_cast<size_t>(i)] = group[static_cast<size_t>(i)]->n_past_;
    // The lead's positions are the rows' (RoPE, and each context's keys: row i's at the lead's
    // position i, since contexts of one layout share their activations, positions included).
    copy_to_device(lead.at<int32_t>("tokens"), tokens.data() + g0, static_cast<size_t>(nb) * sizeof(int32_t));
    int32_t* pos_dev = lead.at<int32_t>("positions");
    copy_to_device(pos_dev, pos.data(), pos.size() * sizeof(int32_t));
    embedding(lead.at<float>("x"), lead.w_.tok_embd.data, ElemType::BF16, lead.at<int32_t>("tokens"), nb, c.dim, c.embed_scale);
    for (int l = 0; l < c.n_layers; ++l) {
      // Row i is context i's token: its KV hooks and attention run on its own cache, as its own
      // eval({token}) runs them.
      lead.run_layer_rows(l, 0, nb, [&](float* att, float* q, float* k, float* v) {
        for (int i = 0; i < nb; ++i)
          group[static_cast<size_t>(i)]->attend(l, 0, 1, pos_dev + i, &pos[static_cast<size_t>(i)], false, att + i * qd, q + i * qd,
                                                k + i * kvd, v + i * kvd);
      });
      for (DeviceContext* s : group) s->note_usage();
    }
    for (DeviceContext* s : group) {
      s->note_usage();
      s->n_past_ += 1;
    }
    if (!logits) {
      synchronize();
      continue;
    }
    std::vector<float> all;
    lead.output_logits(0, nb, &all);
    const size_t V = static_cast<size_t>(c.n_vocab);
    for (int i = 0; i < nb; ++i)
      (*logits)[static_cast<size_t>(g0 + i)].assign(all.begin() + static_cast<ptrdiff_t>(i * V), all.begin() + static_cast<ptrdiff_t>((i + 1) * V));
  }
}

}  // namespace slake::gpu
