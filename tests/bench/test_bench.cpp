// slake-bench's own logic: statistics against direct formulas, the output formats (parsed back),
// the field names llama-bench's readers expect, and the OS peak-memory figures against an
// allocation of known size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench_record.h"
#include "bench_stats.h"
#include "process_memory.h"
#include "slake/error.h"

namespace slake::bench {
namespace {

TEST(BenchStats, MeanStddevAndPercentiles) {
  const Summary s = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt((2.25 + 2.25 + 0.25 + 0.25) / 3.0));  // sample (n - 1) form
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.p99, 3.97);  // 3 + 0.97 * (4 - 3)
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 4);
  EXPECT_EQ(summarize({7}).stddev, 0.0);
  EXPECT_THROW(summarize({}), Error);
}

BenchRecord sample(int n_gen) {
  BenchRecord r;
  r.model_filename = "m,odd \"name\".gguf";
  r.model_type = "llama 1.0B Q4_0";
  r.model_size = 1000;
  r.n_threads = 2;
  r.n_prompt = n_gen ? 0 : 512;
  r.n_gen = n_gen;
  r.n_depth = 4096;
  r.kv_policy = "slake";
  r.kv_budget = 128;
  r.samples_ns = {2e9, 4e9};
  if (n_gen) r.token_ns = {1e6, 2e6, 3e6};
  r.bytes_per_token = 4e6;
  r.peak_rss_bytes = 123456789;
  return r;
}

TEST(BenchRecord, JsonCarriesLlamaBenchFieldsAndDerivedRates) {
  const nlohmann::ordered_json j = sample(128).to_json();
  for (const char* k : {"model_filename", "n_threads", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
                        "samples_ts", "kv_policy", "kv_budget", "backend", "peak_rss_bytes", "peak_device_bytes", "kv_bytes",
                        "decode_gbps"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["avg_ns"].get<uint64_t>(), 3000000000u);
  // 128 tokens in 2 s and in 4 s: 64 and 32 tokens/s.
  EXPECT_DOUBLE_EQ(j["samples_ts"][0].get<double>(), 64.0);
  EXPECT_DOUBLE_EQ(j["avg_ts"].get<double>(), 48.0);
  EXPECT_DOUBLE_EQ(j["token_p50_ns"].get<double>(), 2e6);
  EXPECT_DOUBLE_EQ(j["decode_gbps"].get<double>(), 2.0);  // 4 MB per 2 ms
  EXPECT_EQ(sample(128).test_name(), "tg128 @ d4096");
  EXPECT_EQ(sample(0).test_name(), "pp512 @ d4096");
  EXPECT_FALSE(sample(0).to_json().contains("decode_gbps"));  // only generation reads per token
}

TEST(BenchRecord, FormatsParseBack) {
  const std::vector<BenchRecord> recs{sample(0), sample(128)};
  std::ostringstream json, jsonl, csv, md;
  write_records(json, recs, "json");
  write_records(jsonl, recs, "jsonl");
  write_records(csv, recs, "csv");
  write_records(md, recs, "md");
  const auto arr = nlohmann::json::parse(json.str());
  ASSERT_EQ(arr.size(), 2u);
  EXPECT_EQ(arr[1]["n_gen"], 128);
  std::istringstream lines(jsonl.str());
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    EXPECT_EQ(nlohmann::json::parse(line)["model_filename"], recs[0].model_filename);
    ++n;
  }
  EXPECT_EQ(n, 2);
  // CSV: a header and two rows with as many cells, quotes doubled inside quoted cells.
  std::istringstream c(csv.str());
  std::vector<std::string> rows;
  while (std::getline(c, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u);
  auto cells = [](const std::string& s) {
    int count = 1;
    bool quoted = false;
    for (char ch : s) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) ++count;
    }
    return count;
  };
  EXPECT_EQ(cells(rows[1]), cells(rows[0]));
  EXPECT_EQ(cells(rows[2]), cells(rows[0]));  // the generation row's extra fields have columns too
  EXPECT_EQ(rows[0].rfind("model_filename,", 0), 0u);
  // The column of a field only generation has: empty for the prompt test, the value for the other.
  auto cell = [](const std::string& s, int index) {
    std::string out;
    int at = 0;
    bool quoted = false;
    for (char ch : s) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) {
        ++at;
        continue;
      }
      if (at == index) out += ch;
    }
    return out;
  };
  int gbps = -1;
  for (int i = 0; i < cells(rows[0]); ++i)
    if (cell(rows[0], i) == "decode_gbps") gbps = i;
  ASSERT_GE(gbps, 0);
  EXPECT_EQ(cell(rows[1], gbps), "");
  EXPECT_EQ(std::stod(cell(rows[2], gbps)), 2.0);
  int peak = -1;
  for (int i = 0; i < cells(rows[0]); ++i)
    if (cell(rows[0], i) == "peak_rss_bytes") peak = i;
  ASSERT_GE(peak, 0);
  EXPECT_EQ(cell(rows[1], peak), "123456789");
  EXPECT_EQ(cell(rows[2], peak), "123456789");  // after the generation-only fields, still in its column
  EXPECT_NE(rows[1].find("\"m,odd \"\"name\"\".gguf\""), std::string::npos);
  EXPECT_NE(md.str().find("| tg128 @ d4096 |"), std::string::npos);
  EXPECT_THROW(write_records(md, recs, "xml"), Error);
}

TEST(ProcessMemory, PeakFollowsAKnownAllocation) {
  const size_t before = current_rss_bytes();
  if (before == 0) GTEST_SKIP() << "/proc/self/status is not available";
  if (!reset_peak_rss()) GTEST_SKIP() << "the kernel does not allow resetting the peak (/proc/self/clear_refs)";
  const size_t peak0 = peak_rss_bytes();
  const size_t size = size_t{256} << 20;
  {
    std::unique_ptr<char[]> block(new char[size]);
    std::memset(block.get(), 1, size);  // touched: resident
    EXPECT_GE(current_rss_bytes(), before + size * 9 / 10);
    EXPECT_GE(peak_rss_bytes(), peak0 + size * 9 / 10);
  }
  // Freed (glibc returns a block this large to the OS at once); the peak remembers it until reset.
  EXPECT_GE(peak_rss_bytes(), peak0 + size * 9 / 10);
  ASSERT_TRUE(reset_peak_rss());
  EXPECT_LT(peak_rss_bytes(), peak0 + size / 2);
}

}  // namespace
}  // namespace slake::bench
