#include "metrics.h"

#include <sstream>

#include "process_memory.h"

namespace slake::server {

namespace {

void metric(std::ostringstream& o, const char* name, const char* type, const char* help, double value) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << value << '\n';
}

}  // namespace

std::string prometheus_text(const SchedulerStats& s, const SchedulerConfig& cfg, const HttpCounters& http) {
  std::ostringstream o;
  o.precision(12);
  metric(o, "slake_requests_received_total", "counter", "completion requests received", static_cast<double>(http.requests));
  o << "# HELP slake_requests_total completion requests by outcome\n# TYPE slake_requests_total counter\n";
  o << "slake_requests_total{outcome=\"finished\"} " << s.requests_finished << '\n';
  o << "slake_requests_total{outcome=\"cancelled\"} " << s.requests_cancelled << '\n';
  o << "slake_requests_total{outcome=\"failed\"} " << s.requests_failed << '\n';
  o << "slake_requests_total{outcome=\"invalid\"} " << http.invalid << '\n';
  o << "slake_requests_total{outcome=\"unauthorized\"} " << http.unauthorized << '\n';
  o << "slake_requests_total{outcome=\"busy\"} " << http.rejected_busy << '\n';
  metric(o, "slake_prompt_tokens_total", "counter", "prompt tokens of admitted requests", static_cast<double>(s.prompt_tokens));
  metric(o, "slake_prompt_tokens_cached_total", "counter", "prompt tokens found in a slot's cache or the prompt cache (not prefilled again)",
         static_cast<double>(s.cached_prompt_tokens));
  metric(o, "slake_prefix_hits_total", "counter", "requests whose prompt prefix came from another slot's cache or the prompt cache",
         static_cast<double>(s.prefix_hits));
  metric(o, "slake_prompt_cache_bytes", "gauge", "saved prompts' KV state (--cache-ram)", static_cast<double>(s.prompt_cache_bytes));
  metric(o, "slake_prompt_cache_entries", "gauge", "saved prompts", static_cast<double>(s.prompt_cache_entries));
  metric(o, "slake_generated_tokens_total", "counter", "tokens generated", static_cast<double>(s.generated_tokens));
  metric(o, "slake_decode_steps_total", "counter", "batched decode steps", static_cast<double>(s.decode_steps));
  metric(o, "slake_decode_rows_total", "counter", "sequences decoded, summed over steps (rows / steps = mean batch)",
         static_cast<double>(s.decode_rows));
  metric(o, "slake_decode_seconds_total", "counter", "time in batched decode steps", s.decode_seconds);
  metric(o, "slake_prefill_chunks_total", "counter", "prompt chunks prefilled", static_cast<double>(s.prefill_chunks));
  metric(o, "slake_prefill_seconds_total", "counter", "time prefilling prompts", s.prefill_seconds);
  metric(o, "slake_slots", "gauge", "slots (-np)", cfg.n_slots);
  metric(o, "slake_slots_busy", "gauge", "slots serving a request", s.slots_busy);
  metric(o, "slake_queue_length", "gauge", "requests waiting for a slot or KV memory", s.queue_length);
  metric(o, "slake_kv_memory_limit_bytes", "gauge", "--kv-memory (0: no limit)", static_cast<double>(cfg.kv_memory));
  o << "# HELP slake_kv_bytes KV cache held by each slot (kept between requests)\n# TYPE slake_kv_bytes gauge\n";
  for (size_t i = 0; i < s.kv_bytes.size(); ++i) o << "slake_kv_bytes{slot=\"" << i << "\"} " << s.kv_bytes[i] << '\n';
  o << "# HELP slake_kv_store_bytes the recall stores' part of slake_kv_bytes\n# TYPE slake_kv_store_bytes gauge\n";
  for (size_t i = 0; i < s.kv_store_bytes.size(); ++i) o << "slake_kv_store_bytes{slot=\"" << i << "\"} " << s.kv_store_bytes[i] << '\n';
  o << "# HELP slake_kv_planned_bytes KV cache planned for each slot's request\n# TYPE slake_kv_planned_bytes gauge\n";
  for (size_t i = 0; i < s.kv_planned.size(); ++i) o << "slake_kv_planned_bytes{slot=\"" << i << "\"} " << s.kv_planned[i] << '\n';
  metric(o, "slake_process_resident_bytes", "gauge", "resident memory (VmRSS)", static_cast<double>(bench::current_rss_bytes()));
  metric(o, "slake_process_peak_resident_bytes", "gauge", "peak resident memory (VmHWM)", static_cast<double>(bench::peak_rss_bytes()));
  return o.str();
}

std::string router_prometheus_text(const RouterStats& r) {
  std::ostringstream o;
  o.precision(12);
  metric(o, "slake_models_loaded", "gauge", "models loaded", r.loaded);
  metric(o, "slake_models_max", "gauge", "models that may be loaded at once (--models-max; 0: no limit)", r.models_max);
  metric(o, "slake_models_planned_bytes", "gauge", "memory the loaded models plan: weights, KV caches, prompt caches",
         static_cast<double>(r.planned_bytes));
  metric(o, "slake_models_memory_limit_bytes", "gauge", "--models-memory (0: no limit)", static_cast<double>(r.memory_limit_bytes));
  metric(o, "slake_model_loads_total", "counter", "models loaded", static_cast<double>(r.loads));
  metric(o, "slake_model_unloads_total", "counter", "models unloaded, on request or to make room", static_cast<double>(r.unloads));
  metric(o, "slake_process_resident_bytes", "gauge", "resident memory (VmRSS)", static_cast<double>(bench::current_rss_bytes()));
  metric(o, "slake_process_peak_resident_bytes", "gauge", "peak resident memory (VmHWM)", static_cast<double>(bench::peak_rss_bytes()));
  return o.str();
}

}  // namespace slake::server
