#include "slake/cpu/cpu_weights.h"

#include <memory>

#include "slake/quant/weight_pack.h"

namespace slake {

namespace {

// The view of `w` the CPU path uses: a repacked copy where that applies.
TensorView for_cpu(const Model& m, const TensorView& w, CpuWeights& cw) {
  if (!repack_applies(w)) return w;  // already repacked (synthetic weights), or not to be
  cw.buffers.emplace_back(new uint8_t[w.nbytes]);
  const TensorView v = pack_for_cpu(w, cw.buffers.back().get());
  if (m.release_pages) m.release_pages(w.data, w.nbytes);
  return v;
}

}  // namespace

const CpuWeights& cpu_weights(const Model& m) {
  DerivedWeights& slot = *m.derived;
  std::call_once(slot.once, [&] {
    auto cw = std::make_unique<CpuWeights>();
    for (const LayerWeights& L : m.layers) {
      LayerWeights c = L;
      for (TensorView* t : {&c.wq, &c.wk, &c.wv, &c.wo, &c.w_gate, &c.w_up, &c.w_down, &c.router, &c.shexp_gate, &c.shexp_up,
                            &c.shexp_down, &c.shexp_router})
        if (t->data) *t = for_cpu(m, *t, *cw);
      for (std::vector<TensorView>* e : {&c.exp_gate, &c.exp_up, &c.exp_down})
        for (TensorView& t : *e) t = for_cpu(m, t, *cw);
      cw->layers.push_back(std::move(c));
    }
    // A tied output is the embedding table: repacked where the file's pages can be handed back (a
    // mapped file), and the embedding lookup then reads its rows from the copy (embed_tokens), so
    // it is resident once. Elsewhere (synthetic or Hugging Face weights) a copy would double it.
    const bool tied = m.cfg.tied_output || m.output.data == m.tok_embd.data;
    cw->output = tied && !m.release_pages ? m.output : for_cpu(m, m.output, *cw);
    cw->embedding = tied && cw->output.layout != WeightLayout::Rows ? cw->output : m.tok_embd;
    slot.data = std::shared_ptr<const CpuWeights>(std::move(cw));
  });
  return *static_cast<const CpuWeights*>(slot.data.get());
}

}  // namespace slake
