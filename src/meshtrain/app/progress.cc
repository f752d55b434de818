#include "meshtrain/app/progress.h"

#include <chrono>
#include <memory>

#include "meshtrain/core/memory_tracker.h"

namespace meshtrain::app {

ProgressFn stderr_progress(const std::string& what, const std::string& unit) {
  auto line = std::make_shared<StatusLine>(stderr, /*plain_every_s=*/10.0, /*show_after_s=*/1.0);
  const auto start = std::chrono::steady_clock::now();
  return [line, start, what, unit](const char* phase, int64_t done, int64_t total) {
    const double frac = total > 0 ? double(done) / double(total) : 0.0;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto amount = [&](int64_t v) { return unit == "bytes" ? format_bytes(v) : std::to_string(v) + " " + unit; };
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: %s %3.0f%% (%s of %s), ETA %s", what.c_str(), phase, 100.0 * frac,
                  amount(done).c_str(), amount(total).c_str(),
                  frac > 0 ? format_duration(elapsed * (1 - frac) / frac).c_str() : "?");
    line->update(buf);
  };
}

}  // namespace meshtrain::app
