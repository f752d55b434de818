#include "meshtrain/train/rank_timing.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace meshtrain::train {
namespace {

// Microseconds are the clock's useful resolution here; fewer digits keep
// a record of many ranks short.
double micro_rounded(double s) { return std::round(s * 1e6) / 1e6; }

}  // namespace

double RankTimes::compute_s(int rank) const {
  return std::max(0.0, step_s[size_t(rank)] - collective_s[size_t(rank)]);
}

double RankTimes::median_compute_s() const {
  std::vector<double> c;
  for (int r = 0; r < ranks(); ++r) c.push_back(compute_s(r));
  if (c.empty()) return 0;
  const size_t mid = (c.size() - 1) / 2;
  std::nth_element(c.begin(), c.begin() + long(mid), c.end());
  return c[mid];
}

int RankTimes::slowest() const {
  int best = 0;
  for (int r = 1; r < ranks(); ++r)
    if (compute_s(r) > compute_s(best)) best = r;
  return best;
}

nlohmann::json RankTimes::to_json() const {
  nlohmann::json step = nlohmann::json::array(), compute = nlohmann::json::array();
  for (int r = 0; r < ranks(); ++r) {
    step.push_back(micro_rounded(step_s[size_t(r)]));
    compute.push_back(micro_rounded(compute_s(r)));
  }
  return {{"step_s", step},
          {"compute_s", compute},
          {"median_compute_s", micro_rounded(median_compute_s())},
          {"slowest", slowest()}};
}

RankTimes gather_rank_times(comm::ProcessGroup& world, double step_s, double collective_s) {
  const int R = world.size();
  const double mine[2] = {step_s, collective_s};
  std::vector<double> all(size_t(2 * R));
  world.all_gather(mine, all.data(), all.size(), DType::F64);
  RankTimes t;
  for (int r = 0; r < R; ++r) {
    t.step_s.push_back(all[size_t(2 * r)]);
    t.collective_s.push_back(all[size_t(2 * r + 1)]);
  }
  return t;
}

std::vector<std::string> gather_hosts(comm::ProcessGroup& world) {
  constexpr size_t kWords = 8;  // 64 bytes per name: longer names are cut
  int64_t mine[kWords] = {};
  char name[sizeof mine] = {};
  if (::gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "?");
  std::memcpy(mine, name, sizeof mine);
  const int R = world.size();
  std::vector<int64_t> all(kWords * size_t(R));
  world.all_gather(mine, all.data(), all.size(), DType::I64);
  std::vector<std::string> hosts;
  for (int r = 0; r < R; ++r) {
    const char* p = reinterpret_cast<const char*>(all.data() + kWords * size_t(r));
    hosts.emplace_back(p, strnlen(p, sizeof mine - 1));
  }
  return hosts;
}

}  // namespace meshtrain::train
