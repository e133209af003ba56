// The process's resident memory as the OS counts it (Linux /proc/self/status), for peak-memory
// reports: VmHWM is the peak resident set, and writing 5 to /proc/self/clear_refs resets it to the
// current resident set so each measurement gets its own peak.
#pragma once
#include <cstddef>

namespace slake::bench {

size_t current_rss_bytes();  // VmRSS; 0 when unavailable
size_t peak_rss_bytes();     // VmHWM; 0 when unavailable
size_t anon_rss_bytes();     // RssAnon: resident memory not backed by a file; 0 when unavailable
// Resets the peak to the current resident set; false when the kernel does not allow it (then the
// peak is the process's since it started).
bool reset_peak_rss();

}  // namespace slake::bench
