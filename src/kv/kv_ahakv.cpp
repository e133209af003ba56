#include "slake/kv/kv_ahakv.h"

#include <algorithm>
#include <cmath>

#include "slake/error.h"
#include "slake/kv/kv_scores.h"

namespace slake {

bool operator==(const AhaParts& a, const AhaParts& b) { return a.gain == b.gain && a.recent == b.recent && a.value == b.value; }

AhaParts parse_aha_parts(const std::string& s) {
  if (s == "none") return AhaParts{false, false, false};
  AhaParts p{false, false, false};
  size_t at = 0;
  while (true) {
    const size_t plus = std::min(s.find('+', at), s.size());
    const std::string part = s.substr(at, plus - at);
    bool* flag = part == "gain" ? &p.gain : part == "recent" ? &p.recent : part == "value" ? &p.value : nullptr;
    if (!flag) fail("AhaKV parts must be '+'-joined gain, recent and value, or none; got '" + s + "'");
    if (*flag) fail("AhaKV parts name '" + part + "' twice in '" + s + "'");
    *flag = true;
    if (plus == s.size()) break;
    at = plus + 1;
  }
  return p;
}

std::string aha_parts_name(const AhaParts& p) {
  std::string n;
  for (auto [on, name] : {std::pair{p.gain, "gain"}, std::pair{p.recent, "recent"}, std::pair{p.value, "value"}})
    if (on) n += (n.empty() ? "" : "+") + std::string(name);
  return n.empty() ? "none" : n;
}

double step_gain(int64_t row_len, int64_t budget) {
  if (budget <= 0 || row_len <= budget) return 1.0;
  return std::sqrt(std::max(2.0 * std::log(static_cast<double>(row_len) / static_cast<double>(budget)), 1.0));
}

void value_prior(const float* v2, int n, double* out) {
  if (n <= 0) return;
  std::vector<double> in(v2, v2 + n);
  pool_tokens(in.data(), n, TokenPool::Avg5, out);
  const double m = *std::max_element(out, out + n);
  for (int j = 0; j < n; ++j) out[j] = m > 0 ? out[j] / m : 1.0;
}

void AttentionSums::grow(int n) {
  if (n > rows()) sum_.resize(static_cast<size_t>(n), 0.0);
}

void AttentionSums::add(const double* a, int n, int32_t qpos) {
  if (n < rows()) fail("internal: an attention row is shorter than the rows summed");
  grow(n);
  if (recent_ <= 0) {
    for (int j = 0; j < n; ++j) sum_[static_cast<size_t>(j)] += a[j];
    return;
  }
  ring_.resize(static_cast<size_t>(recent_));
  std::vector<float>& r = ring_[static_cast<size_t>(qpos % recent_)];  // empty until a query fills it
  r.resize(static_cast<size_t>(n), 0.0f);
  // The sums take the rows as the ring stores them (fp32), so a row that leaves takes away
  // exactly what it added.
  for (int j = 0; j < n; ++j) {
    const float v = static_cast<float>(a[j]);
    sum_[static_cast<size_t>(j)] += static_cast<double>(v) - static_cast<double>(r[static_cast<size_t>(j)]);
    r[static_cast<size_t>(j)] = v;
  }
}

size_t AttentionSums::bytes() const {
  size_t b = sum_.size() * sizeof(double) + v2.size() * sizeof(float);
  for (const std::vector<float>& r : ring_) b += r.size() * sizeof(float);
  return b;
}

void AttentionSums::keep_rows(const std::vector<char>& keep) {
  auto compact = [&](auto& v) {
    size_t w = 0;
    for (size_t r = 0; r < v.size() && r < keep.size(); ++r)
      if (keep[r]) v[w++] = v[r];
    v.resize(w);
  };
  if (keep.size() < sum_.size() || keep.size() < v2.size()) fail("internal: attention sums keep fewer flags than rows");
  compact(sum_);
  compact(v2);
  for (std::vector<float>& r : ring_) compact(r);
  // A prompt's eviction leaves a fraction of its rows: give the rest back, so that the rings of
  // the layers done hold their budget, not the prompt (one decode victim at a time keeps them).
  auto release = [](auto& v) {
    if (v.capacity() > 2 * v.size() + 64) v.shrink_to_fit();
  };
  release(sum_);
  release(v2);
  for (std::vector<float>& r : ring_) release(r);
}

}  // namespace slake
