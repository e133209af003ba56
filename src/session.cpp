#include "slake/session.h"

#include <string>

#include "slake/batch_decode.h"
#include "slake/error.h"

namespace slake {

void decode_sessions(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens,
                     std::vector<std::vector<float>>* logits) {
  if (sessions.size() != tokens.size())
    fail("decode_sessions: " + std::to_string(sessions.size()) + " sessions but " + std::to_string(tokens.size()) + " tokens");
  std::vector<Context*> ctxs;
  for (Session* s : sessions) {
    if (!s) fail("decode_sessions: a session is null");
    ctxs.push_back(s->cpu_context());
  }
  bool all_cpu = !ctxs.empty();
  for (Context* c : ctxs) all_cpu = all_cpu && c && &c->pool() == &ctxs[0]->pool();
  if (all_cpu) return decode_batch(ctxs, tokens, logits);
  if (!sessions.empty() && sessions[0]->decode_together(sessions, tokens, logits)) return;
  if (logits) logits->assign(sessions.size(), {});
  for (size_t i = 0; i < sessions.size(); ++i) sessions[i]->eval({tokens[i]}, logits ? &(*logits)[i] : nullptr);
}

}  // namespace slake
