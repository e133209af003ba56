// One slake-bench measurement and how it is written: markdown (llama-bench's table), CSV, JSON
// (an array) and JSONL (one object per line). Field names follow llama-bench where they mean the
// same thing, so scripts written for it can read ours.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace slake::bench {

struct BenchRecord {
  // What was run.
  std::string model_filename, model_type;  // model_type: architecture and weight type, "(synthetic)" when so
  uint64_t model_size = 0, model_n_params = 0;
  bool synthetic = false;
  std::string backend = "cpu";
  int n_threads = 0, n_prompt = 0, n_gen = 0, n_depth = 0;
  std::string kv_policy = "full";
  int kv_budget = 0, kv_window = 0, kv_observe = 0, kv_evict_every = 1;  // kv_observe 0: the window
  int kv_prefill_chunk = 0;  // 0: prompts in one pass
  int kv_recall_pages = 0;   // recall store pages a query reads (0: no store)
  std::string kv_store_type = "q8_0", kv_recall_score = "keys";
  int kv_recall_every = 1;
  bool kv_store_file = false;  // the store's rows in memory-mapped files (--kv-store-file)
  std::string type_k = "f16", type_v = "f16";  // KV cache types, as llama-bench names the columns
  // Timings of the whole test per repetition (prompt processing or generation), in ns.
  std::vector<double> samples_ns;
  // Generation: the latency of every decoded token, all repetitions.
  std::vector<double> token_ns;
  // Memory.
  uint64_t peak_rss_bytes = 0, peak_device_bytes = 0;
  bool peak_rss_per_test = true;  // false: the OS could not reset the peak, so it is the process's so far
  uint64_t kv_bytes_start = 0, kv_bytes_end = 0, kv_peak_bytes = 0, kv_store_bytes_end = 0;  // store: part of kv_bytes_end
  // An evicting policy: each layer's decode budget after the depth's prefill (the last repetition),
  // so that uneven per-layer budgets can be told from a slow step. Empty for the full cache.
  std::vector<int64_t> kv_layer_budgets;
  // Generation: bytes read per decoded token (every weight once, plus the KV cache in use; the
  // extra pass of an evicting policy over the keys is not counted, so this is a lower bound) and
  // the machine's read bandwidth.
  double bytes_per_token = 0, mem_bandwidth_gbps = 0;
  std::string test_time;

  std::string test_name() const;  // "pp512", "tg128", "tg128 @ d4096"
  nlohmann::ordered_json to_json() const;
};

// Writes all records in `format` (md, csv, json, jsonl); throws slake::Error for others.
void write_records(std::ostream& out, const std::vector<BenchRecord>& records, const std::string& format);

}  // namespace slake::bench
