// GET /metrics: the scheduler's counters and gauges, the HTTP layer's rejections and the process's
// memory, in Prometheus' text format (version 0.0.4).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "scheduler.h"

namespace slake::server {

// Counted by the HTTP handlers.
struct HttpCounters {
  std::atomic<uint64_t> requests{0};          // completion requests received
  std::atomic<uint64_t> invalid{0};           // answered 400
  std::atomic<uint64_t> unauthorized{0};      // answered 401
  std::atomic<uint64_t> rejected_busy{0};     // answered 503
};

std::string prometheus_text(const SchedulerStats& s, const SchedulerConfig& cfg, const HttpCounters& http);

// Router mode's own gauges (model_router.h): the models loaded and what they plan.
struct RouterStats {
  int loaded = 0, models_max = 0;
  size_t planned_bytes = 0, memory_limit_bytes = 0;
  uint64_t loads = 0, unloads = 0;
};

std::string router_prometheus_text(const RouterStats& r);

}  // namespace slake::server
