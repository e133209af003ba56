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

}  // namespace slake::server
