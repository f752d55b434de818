#include "meshtrain/comm/comm_stats.h"

#include <cstdio>

namespace meshtrain::comm {

OpStats CommStats::total() const {
  OpStats t;
  for (const auto& s : ops) {
    t.calls += s.calls;
    t.bytes += s.bytes;
    t.call_s += s.call_s;
    t.wait_s += s.wait_s;
  }
  return t;
}

std::string CommStats::str() const {
  std::string out;
  char line[200];
  for (int k = 0; k < kNumOpKinds; ++k) {
    const auto& s = ops[size_t(k)];
    if (s.calls == 0) continue;
    std::snprintf(line, sizeof line, "%-15s calls=%llu bytes=%llu call=%.6fs wait=%.6fs\n",
                  std::string(op_kind_name(OpKind(k))).c_str(), (unsigned long long)s.calls,
                  (unsigned long long)s.bytes, s.call_s, s.wait_s);
    out += line;
  }
  return out;
}

void StatsRecorder::add(OpKind k, uint64_t bytes, double call_s, double wait_s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = stats_.ops[size_t(k)];
  s.calls += 1;
  s.bytes += bytes;
  s.call_s += call_s;
  s.wait_s += wait_s;
}

void StatsRecorder::add_time(OpKind k, double call_s, double wait_s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = stats_.ops[size_t(k)];
  s.call_s += call_s;
  s.wait_s += wait_s;
}

CommStats StatsRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void StatsRecorder::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = CommStats{};
}

}  // namespace meshtrain::comm
