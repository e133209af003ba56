// The sampler chain of sampler.h: penalty, top-k, top-p, min-p, temperature, draw.
#include "slake/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "slake/error.h"

namespace slake {

namespace {

struct Candidate {
  double logit;
  int32_t id;
};

// Highest logit first, then lower id: a strict total order, so nth_element and sort give the same
// candidates and the same order with every standard library.
bool before(const Candidate& a, const Candidate& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// A parameter's value as written on a command line ("0.95", not "0.950000").
std::string shown(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// llama.cpp's penalties sampler over the last repeat_last_n tokens: the repetition penalty once per
// distinct token, then frequency x count + presence (OpenAI's penalties, subtracted).
void apply_penalties(const SamplerParams& p, const std::vector<int32_t>& recent, std::vector<double>& logits) {
  const bool off = p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
  if (off || p.repeat_last_n == 0 || recent.empty()) return;
  const size_t n = p.repeat_last_n < 0 ? recent.size() : std::min(recent.size(), static_cast<size_t>(p.repeat_last_n));
  std::unordered_map<int32_t, int> count;
  for (auto it = recent.end() - static_cast<std::ptrdiff_t>(n); it != recent.end(); ++it) ++count[*it];
  const int n_vocab = static_cast<int>(logits.size());
  for (const auto& [t, c] : count) {
    if (t < 0 || t >= n_vocab) continue;
    double& l = logits[static_cast<size_t>(t)];
    l = l <= 0 ? l * p.repeat_penalty : l / p.repeat_penalty;
    l -= static_cast<double>(c) * p.frequency_penalty + p.presence_penalty;
  }
}

}  // namespace

void apply_dry(const SamplerParams& p, const std::vector<int32_t>& recent, const std::unordered_set<int32_t>& breakers,
               std::vector<double>& logits) {
  if (p.dry_multiplier == 0.0f || p.dry_base < 1.0f || p.dry_penalty_last_n == 0) return;
  const size_t n = p.dry_penalty_last_n < 0 ? recent.size() : std::min(recent.size(), static_cast<size_t>(p.dry_penalty_last_n));
  if (n <= static_cast<size_t>(p.dry_allowed_length)) return;
  // r: the window newest first. A repetition reaches back at most to the newest breaker.
  std::vector<int32_t> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = recent[recent.size() - 1 - i];
  size_t limit = n;
  for (size_t i = 0; i < n; ++i)
    if (breakers.count(r[i])) {
      limit = i;
      break;
    }
  if (limit < static_cast<size_t>(p.dry_allowed_length)) return;
  // Z-function of r: z[k] = how many tokens before position k (newest first) repeat the newest ones.
  std::vector<size_t> z(n, 0);
  for (size_t k = 1, l = 0, rt = 0; k < n; ++k) {
    if (k < rt) z[k] = std::min(rt - k, z[k - l]);
    while (k + z[k] < n && r[z[k]] == r[k + z[k]]) ++z[k];
    if (k + z[k] > rt) l = k, rt = k + z[k];
  }
  // The token that followed each earlier repetition would extend the current one.
  std::unordered_map<int32_t, size_t> longest;
  for (size_t k = 1; k < n; ++k) {
    const size_t len = std::min(z[k], limit);
    if (len < static_cast<size_t>(p.dry_allowed_length)) continue;
    size_t& m = longest[r[k - 1]];
    m = std::max(m, len);
  }
  const int max_exponent = p.dry_base > 1.000001f ? static_cast<int>(88.7228391f / std::log(p.dry_base)) : 0;
  for (const auto& [t, len] : longest) {
    if (t < 0 || static_cast<size_t>(t) >= logits.size() || breakers.count(t)) continue;
    int e = static_cast<int>(len) - p.dry_allowed_length;
    if (max_exponent > 0) e = std::min(e, max_exponent);
    logits[static_cast<size_t>(t)] -= static_cast<double>(p.dry_multiplier) * std::pow(static_cast<double>(p.dry_base), e);
  }
}

void validate(const SamplerParams& p) {
  auto bad = [](const std::string& what) { fail("sampling: " + what); };
  if (std::isnan(p.temp) || std::isinf(p.temp)) bad("temperature must be a finite number");
  if (p.top_k < 0) bad("top-k must be >= 0 (0: off), got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top-p must be in (0, 1] (1: off), got " + shown(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min-p must be in [0, 1] (0: off), got " + shown(p.min_p));
  if (!(p.repeat_penalty > 0.0f) || std::isinf(p.repeat_penalty))
    bad("repeat penalty must be a positive number (1: off), got " + shown(p.repeat_penalty));
  for (const auto& [name, v] : {std::pair<const char*, float>{"presence", p.presence_penalty}, {"frequency", p.frequency_penalty}})
    if (!(v >= -2.0f && v <= 2.0f)) bad(std::string(name) + " penalty must be in [-2, 2] (0: off), got " + shown(v));
  if (p.repeat_last_n < -1)
    bad("repeat-last-n must be >= -1 (0: off, -1: all), got " + std::to_string(p.repeat_last_n));
  if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f)) bad("typical-p must be in (0, 1] (1: off), got " + shown(p.typical_p));
  if (!(p.xtc_probability >= 0.0f && p.xtc_probability <= 1.0f))
    bad("XTC probability must be in [0, 1] (0: off), got " + shown(p.xtc_probability));
  if (!(p.xtc_threshold >= 0.0f && p.xtc_threshold <= 1.0f)) bad("XTC threshold must be in [0, 1], got " + shown(p.xtc_threshold));
  if (!(p.dry_multiplier >= 0.0f) || std::isinf(p.dry_multiplier)) bad("DRY multiplier must be >= 0 (0: off), got " + shown(p.dry_multiplier));
  if (!(p.dry_base >= 1.0f) || std::isinf(p.dry_base)) bad("DRY base must be >= 1, got " + shown(p.dry_base));
  if (p.dry_allowed_length < 0) bad("DRY allowed length must be >= 0, got " + std::to_string(p.dry_allowed_length));
  if (p.dry_penalty_last_n < -1) bad("DRY penalty-last-n must be >= -1 (0: off, -1: all), got " + std::to_string(p.dry_penalty_last_n));
  if (p.mirostat != 0 && p.mirostat != 2)
    bad("mirostat must be 0 (off) or 2 (mirostat v2; v1 is not implemented), got " + std::to_string(p.mirostat));
  if (!(p.mirostat_tau > 0.0f) || std::isinf(p.mirostat_tau)) bad("mirostat tau must be a positive number, got " + shown(p.mirostat_tau));
  if (!(p.mirostat_eta > 0.0f) || std::isinf(p.mirostat_eta)) bad("mirostat eta must be a positive number, got " + shown(p.mirostat_eta));
}

TokenProbs candidate_distribution(const SamplerParams& p, const float* logits, int n_vocab,
                                  const std::vector<int32_t>& recent, double xtc_roll,
                                  const std::unordered_set<int32_t>* dry_breakers) {
  validate(p);
  if (logits == nullptr || n_vocab <= 0) fail("sampling: no logits");
  std::vector<double> l(logits, logits + n_vocab);
  apply_penalties(p, recent, l);
  if (p.dry_multiplier > 0.0f) apply_dry(p, recent, dry_breakers ? *dry_breakers : std::unordered_set<int32_t>{}, l);

  TokenProbs out;
  if (p.temp <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; ++i)
      if (l[static_cast<size_t>(i)] > l[static_cast<size_t>(best)]) best = i;
    out.ids = {best};
    out.probs = {1.0};
    return out;
  }

  std::vector<Candidate> c(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) c[static_cast<size_t>(i)] = {l[static_cast<size_t>(i)], i};
  size_t n = c.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    n = static_cast<size_t>(p.top_k);
    std::nth_element(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n), c.end(), before);
  }
  std::sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n), before);

  // exp(l_i - l_max) over the candidates still in: the temperature-1 probabilities relative to the
  // most probable one, and their total.
  std::vector<double> rel;
  double total = 0;
  const auto relative = [&] {
    rel.assign(n, 0.0);
    total = 0;
    for (size_t i = 0; i < n; ++i) total += rel[i] = std::exp(c[i].logit - c[0].logit);
  };
  relative();
  if (p.typical_p < 1.0f) {
    double entropy = 0;
    for (size_t i = 0; i < n; ++i) {
      const double q = rel[i] / total;
      if (q > 0) entropy -= q * std::log(q);
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    const auto shifted = [&](size_t i) { return std::fabs(-std::log(rel[i] / total) - entropy); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shifted(a) < shifted(b); });
    size_t keep = n;
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += rel[order[i]] / total;
      if (cum > p.typical_p) {
        keep = i + 1;
        break;
      }
    }
    std::vector<Candidate> kept;
    for (size_t i = 0; i < keep; ++i) kept.push_back(c[order[i]]);
    std::sort(kept.begin(), kept.end(), before);
    std::copy(kept.begin(), kept.end(), c.begin());
    n = keep;
    relative();
  }
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += rel[i] / total;
      if (cum >= p.top_p) {
        n = i + 1;
        break;
      }
    }
    relative();
  }
  if (p.min_p > 0.0f) {
    size_t keep = 1;  // the first candidate has rel = 1 >= min_p
    while (keep < n && rel[keep] >= p.min_p) ++keep;
    n = keep;
    relative();
  }
  if (xtc_roll <= p.xtc_probability && p.xtc_threshold <= 0.5f && n >= 2) {
    // The leading run of candidates at or above the threshold, all but its last.
    size_t last = 0;
    while (last + 1 < n && rel[last + 1] / total >= p.xtc_threshold) ++last;
    if (last > 0 && rel[0] / total >= p.xtc_threshold) {
      c.erase(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(last));
      n -= last;
    }
  }

  out.ids.resize(n);
  out.probs.resize(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    out.ids[i] = c[i].id;
    sum += out.probs[i] = std::exp((c[i].logit - c[0].logit) / p.temp);
  }
  for (double& q : out.probs) q /= sum;
  return out;
}

TokenProbs mirostat_distribution(const SamplerParams& p, const float* logits, int n_vocab, double mu) {
  validate(p);
  if (logits == nullptr || n_vocab <= 0) fail("sampling: no logits");
  std::vector<Candidate> c(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) c[static_cast<size_t>(i)] = {static_cast<double>(logits[i]), i};
  std::sort(c.begin(), c.end(), before);
  TokenProbs out;
  if (p.temp <= 0.0f) {
    out.ids = {c[0].id};
    out.probs = {1.0};
    return out;
  }
  double sum = 0;
  std::vector<double> q(c.size());
  for (size_t i = 0; i < c.size(); ++i) sum += q[i] = std::exp((c[i].logit - c[0].logit) / p.temp);
  size_t n = 1;
  while (n < c.size() && -std::log2(q[n] / sum) <= mu) ++n;
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += q[i];
  for (size_t i = 0; i < n; ++i) {
    out.ids.push_back(c[i].id);
    out.probs.push_back(q[i] / kept);
  }
  return out;
}

size_t pick_index(const std::vector<double>& probs, double u) {
  double cum = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (u < cum) return i;
  }
  return probs.empty() ? 0 : probs.size() - 1;
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed), mu_(2.0 * params.mirostat_tau) {
  validate(params_);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(const float* logits, int n_vocab) {
  if (params_.mirostat == 2) {
    const TokenProbs d = mirostat_distribution(params_, logits, n_vocab, mu_);
    const size_t i = d.ids.size() == 1 ? 0 : pick_index(d.probs, uniform());
    mu_ -= params_.mirostat_eta * (-std::log2(d.probs[i]) - params_.mirostat_tau);
    return d.ids[i];
  }
  // XTC's roll is drawn only when XTC is on, so that other settings draw as before.
  const double roll = params_.xtc_probability > 0.0f && params_.temp > 0.0f ? uniform() : 2.0;
  const TokenProbs d = candidate_distribution(params_, logits, n_vocab, recent_, roll, &dry_breakers_);
  if (d.ids.size() == 1) return d.ids[0];
  return d.ids[pick_index(d.probs, uniform())];
}

void Sampler::accept(int32_t token) {
  // The history the penalties and DRY read: the longer of their windows (-1: everything).
  const bool dry = params_.dry_multiplier > 0.0f && params_.dry_penalty_last_n != 0;
  const int n = params_.repeat_last_n < 0 || (dry && params_.dry_penalty_last_n < 0)
                    ? -1
                    : std::max(params_.repeat_last_n, dry ? params_.dry_penalty_last_n : 0);
  if (n == 0) return;
  recent_.push_back(token);
  // Trim in batches so that accepting stays O(1) amortised.
  if (n > 0 && recent_.size() >= 2 * static_cast<size_t>(n))
    recent_.erase(recent_.begin(), recent_.end() - n);
}

}  // namespace slake
