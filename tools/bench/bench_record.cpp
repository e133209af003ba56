#include "bench_record.h"

#include <algorithm>
#include <cstdio>

#include "bench_stats.h"
#include "slake/error.h"

namespace slake::bench {

std::string BenchRecord::test_name() const {
  std::string s = n_gen == 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
  if (n_depth > 0) s += " @ d" + std::to_string(n_depth);
  return s;
}

nlohmann::ordered_json BenchRecord::to_json() const {
  const int n_tokens = n_gen == 0 ? n_prompt : n_gen;
  std::vector<double> ts;
  for (double ns : samples_ns) ts.push_back(n_tokens * 1e9 / ns);
  const Summary t = summarize(samples_ns), r = summarize(ts);
  nlohmann::ordered_json j;
  j["model_filename"] = model_filename;
  j["model_type"] = model_type;
  j["model_size"] = model_size;
  j["model_n_params"] = model_n_params;
  j["synthetic"] = synthetic;
  j["backend"] = backend;
  j["n_threads"] = n_threads;
  j["n_prompt"] = n_prompt;
  j["n_gen"] = n_gen;
  j["n_depth"] = n_depth;
  j["kv_policy"] = kv_policy;
  j["kv_budget"] = kv_budget;
  j["kv_window"] = kv_window;
  j["kv_observe"] = kv_observe;
  j["kv_evict_every"] = kv_evict_every;
  j["kv_prefill_chunk"] = kv_prefill_chunk;
  if (kv_recall_pages > 0) {
    j["kv_recall_pages"] = kv_recall_pages;
    j["kv_store_type"] = kv_store_type;
    j["kv_recall_score"] = kv_recall_score;
    j["kv_recall_every"] = kv_recall_every;
    j["kv_store_file"] = kv_store_file;
  }
  j["type_k"] = type_k;
  j["type_v"] = type_v;
  j["test_time"] = test_time;
  j["avg_ns"] = static_cast<uint64_t>(t.mean);
  j["stddev_ns"] = static_cast<uint64_t>(t.stddev);
  j["avg_ts"] = r.mean;
  j["stddev_ts"] = r.stddev;
  j["samples_ns"] = samples_ns;
  j["samples_ts"] = ts;
  if (!token_ns.empty()) {
    const Summary k = summarize(token_ns);
    j["token_avg_ns"] = k.mean;
    j["token_stddev_ns"] = k.stddev;
    j["token_p50_ns"] = k.p50;
    j["token_p99_ns"] = k.p99;
    j["bytes_per_token"] = bytes_per_token;
    j["decode_gbps"] = bytes_per_token / k.mean;  // bytes per ns = GB/s
    j["mem_bandwidth_gbps"] = mem_bandwidth_gbps;
  }
  j["peak_rss_bytes"] = peak_rss_bytes;
  j["peak_rss_per_test"] = peak_rss_per_test;
  j["peak_device_bytes"] = peak_device_bytes;
  j["kv_bytes_start"] = kv_bytes_start;
  j["kv_bytes"] = kv_bytes_end;
  j["kv_peak_bytes"] = kv_peak_bytes;
  if (kv_recall_pages > 0) j["kv_store_bytes"] = kv_store_bytes_end;
  if (!kv_layer_budgets.empty()) j["kv_layer_budgets"] = kv_layer_budgets;
  return j;
}

namespace {

std::string csv_cell(const nlohmann::ordered_json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>(), q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }
  if (v.is_array()) {  // llama-bench writes sample lists as one quoted, space-separated cell
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x.dump();
    return "\"" + s + "\"";
  }
  return v.dump();
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

}  // namespace

void write_records(std::ostream& out, const std::vector<BenchRecord>& records, const std::string& format) {
  if (format == "json") {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const BenchRecord& r : records) a.push_back(r.to_json());
    out << a.dump(2) << "\n";
  } else if (format == "jsonl") {
    for (const BenchRecord& r : records) out << r.to_json().dump() << "\n";
  } else if (format == "csv") {
    // Generation tests carry fields that prompt tests do not: the columns are every record's
    // fields, each where it first appears, and a record leaves the ones it lacks empty.
    std::vector<nlohmann::ordered_json> rows;
    std::vector<std::string> columns;
    for (const BenchRecord& r : records) {
      rows.push_back(r.to_json());
      size_t at = 0;  // where a new field goes: after the record's previous field
      for (auto it = rows.back().begin(); it != rows.back().end(); ++it) {
        const std::string key = it.key();
        const auto found = std::find(columns.begin(), columns.end(), key);
        if (found != columns.end()) {
          at = static_cast<size_t>(found - columns.begin()) + 1;
        } else {
          columns.insert(columns.begin() + static_cast<std::ptrdiff_t>(at), key);
          ++at;
        }
      }
    }
    if (rows.empty()) return;
    std::string header;
    for (const std::string& k : columns) header += (header.empty() ? "" : ",") + k;
    out << header << "\n";
    for (const nlohmann::ordered_json& j : rows) {
      std::string line;
      for (size_t c = 0; c < columns.size(); ++c)
        line += (c ? "," : "") + (j.contains(columns[c]) ? csv_cell(j[columns[c]]) : std::string());
      out << line << "\n";
    }
  } else if (format == "md") {
    out << "| model | size | backend | threads | kv | test | t/s | ms/token p50 / p99 | GB/s (of probe) | KV MiB | peak RSS MiB |\n";
    out << "| --- | ---: | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
    for (const BenchRecord& r : records) {
      const nlohmann::ordered_json j = r.to_json();
      const std::string kv = (r.kv_policy == "full" || r.kv_budget == 0 ? r.kv_policy : r.kv_policy + " " + std::to_string(r.kv_budget)) +
                             (r.kv_evict_every > 1 ? " every " + std::to_string(r.kv_evict_every) : "") +
                             (r.kv_prefill_chunk > 0 ? " chunk " + std::to_string(r.kv_prefill_chunk) : "") +
                             (r.kv_recall_pages > 0 ? " recall " + std::to_string(r.kv_recall_pages) + " " + r.kv_recall_score + " " + r.kv_store_type +
                                                              (r.kv_store_file ? " in files" : "") : "") +
                             (r.type_k == r.type_v ? " " + r.type_k : " " + r.type_k + "/" + r.type_v);
      std::string lat = "", gbps = "";
      if (j.contains("token_p50_ns")) {
        lat = fmt("%.3f", j["token_p50_ns"].get<double>() / 1e6) + " / " + fmt("%.3f", j["token_p99_ns"].get<double>() / 1e6);
        gbps = fmt("%.1f", j["decode_gbps"].get<double>()) + " (" + fmt("%.1f", r.mem_bandwidth_gbps) + ")";
      }
      const std::string size = r.model_size >= (uint64_t{1} << 30) ? fmt("%.2f GiB", r.model_size / 1073741824.0)
                                                                    : fmt("%.2f MiB", r.model_size / 1048576.0);
      out << "| " << r.model_type << " | " << size << " | " << r.backend << " | "
          << r.n_threads << " | " << kv << " | " << r.test_name() << " | "
          << fmt("%.2f", j["avg_ts"].get<double>()) + " ± " + fmt("%.2f", j["stddev_ts"].get<double>()) << " | " << lat
          << " | " << gbps << " | " << fmt("%.2f", r.kv_bytes_end / 1048576.0) << " | "
          << fmt("%.1f", r.peak_rss_bytes / 1048576.0) << " |\n";
    }
  } else {
    fail("unknown output format '" + format + "' (md, csv, json, jsonl)");
  }
}

}  // namespace slake::bench
