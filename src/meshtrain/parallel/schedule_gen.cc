#include "meshtrain/parallel/schedule_gen.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <set>
#include <tuple>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/schedule_list.h"
#include "meshtrain/parallel/schedule_zero_bubble.h"

namespace meshtrain::parallel {

namespace {

Schedule empty_schedule(const std::string& name, int p, int m) {
  MT_REQUIRE(ConfigError, p >= 1 && m >= 1, "schedule ", name, ": p = ", p, ", m = ", m, " (both must be >= 1)");
  Schedule s;
  s.name = name;
  s.ranks = p;
  s.micro_batches = m;
  for (int c = 0; c < p; ++c) s.chunk_rank.push_back(c);
  s.actions.resize(size_t(p));
  return s;
}

// Forward of micro-batch mb on rank r (= chunk r) with its transfers.
void forward(Schedule& s, int r, int mb) {
  auto& l = s.actions[size_t(r)];
  if (r > 0) l.push_back({Op::RecvActivation, mb, r, -1, -1, r - 1});
  l.push_back({Op::Forward, mb, r});
  if (r < s.ranks - 1) l.push_back({Op::SendActivation, mb, r, -1, -1, r + 1});
}

// Fused backward of micro-batch mb on rank r with its transfers.
void backward(Schedule& s, int r, int mb) {
  auto& l = s.actions[size_t(r)];
  if (r < s.ranks - 1) l.push_back({Op::RecvGradient, mb, r, -1, -1, r + 1});
  l.push_back({Op::Backward, mb, r});
  if (r > 0) l.push_back({Op::SendGradient, mb, r, -1, -1, r - 1});
}

}  // namespace

Schedule gpipe_schedule(int p, int m, bool forward_only) {
  Schedule s = empty_schedule(forward_only ? "forward" : "gpipe", p, m);
  for (int r = 0; r < p; ++r) {
    for (int mb = 0; mb < m; ++mb) forward(s, r, mb);
    if (!forward_only)
      for (int mb = 0; mb < m; ++mb) backward(s, r, mb);
  }
  return s;
}

Schedule one_f_one_b_schedule(int p, int m) {
  Schedule s = empty_schedule("1f1b", p, m);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    int f = 0, b = 0;
    for (; f < warmup; ++f) forward(s, r, f);
    for (; f < m; ++f, ++b) {
      forward(s, r, f);
      backward(s, r, b);
    }
    for (; b < m; ++b) backward(s, r, b);
  }
  return s;
}

Schedule interleaved_schedule(int p, int m, int v) {
  MT_REQUIRE(ConfigError, v >= 1, "interleaved schedule: v = ", v, " (expected >= 1)");
  ListPolicy policy;
  policy.alternate = true;
  for (int r = 0; r < p; ++r) policy.max_live.push_back(std::min(m * v, 2 * (p - r - 1) + (v - 1) * p + 1));
  // Groups of p micro-batches go through a rank's chunks one after another.
  policy.forward_key = [p](int mb, int c) { return std::array<int, 3>{mb / p, c, mb % p}; };
  policy.backward_key = [p](int mb, int c) { return std::array<int, 3>{mb / p, -c, mb % p}; };
  std::vector<int> chunk_rank;
  for (int c = 0; c < p * v; ++c) chunk_rank.push_back(c % p);
  return list_schedule("interleaved", p, m, chunk_rank, policy);
}

Schedule forward_schedule(int p, int m, const std::vector<int>& chunk_rank) {
  ListPolicy policy;
  policy.forward_only = true;
  return list_schedule("forward", p, m, chunk_rank, policy);
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"};
  return names;
}

ChunkPlacement placement_of(const std::string& name) {
  return name == "zb-v" ? ChunkPlacement::V : ChunkPlacement::Loop;
}

bool splits_backward(const std::string& name) { return name == "zb-h1" || name == "zb-v"; }

void check_schedule(const std::string& name, int p, int m, int v) {
  const auto& names = schedule_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    MT_THROW(ConfigError, "parallel.schedule = \"", name, "\": expected one of ", list);
  }
  MT_REQUIRE(ConfigError, p >= 1 && m >= 1 && v >= 1, "parallel.schedule = ", name, ": pp = ", p,
             ", micro-batches = ", m, ", virtual_stages = ", v, " (all must be >= 1)");
  if (name == "interleaved")
    MT_REQUIRE(ConfigError, v >= 2, "parallel.schedule = interleaved needs parallel.virtual_stages >= 2 chunks per ",
               "rank (v = ", v, " is 1f1b)");
  else if (name == "zb-v")
    MT_REQUIRE(ConfigError, v == 2, "parallel.schedule = zb-v places exactly 2 chunks per rank in a V: set ",
               "parallel.virtual_stages = 2 (got ", v, ")");
  else
    MT_REQUIRE(ConfigError, v == 1, "parallel.schedule = ", name, " runs one chunk per rank: parallel.virtual_stages = ",
               v, " needs schedule = interleaved (or zb-v for 2)");
}

Schedule make_schedule(const std::string& name, int p, int m, int v) {
  check_schedule(name, p, m, v);
  if (name == "gpipe") return gpipe_schedule(p, m);
  if (name == "1f1b") return one_f_one_b_schedule(p, m);
  if (name == "interleaved") return interleaved_schedule(p, m, v);
  if (name == "zb-h1") return zb_h1_schedule(p, m);
  return zb_v_schedule(p, m);
}

Schedule checked_schedule(const std::string& name, int p, int m, int v) {
  static std::mutex mu;
  static std::set<std::tuple<std::string, int, int, int>> checked;
  Schedule s = make_schedule(name, p, m, v);
  const auto key = std::make_tuple(name, p, m, v);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (checked.count(key)) return s;
  }
  validate(s);
  std::lock_guard<std::mutex> lock(mu);
  checked.insert(key);
  return s;
}

double bubble_formula(const std::string& name, int p, int m, int v) {
  const double P = p, M = m, V = v;
  if (name == "gpipe" || name == "1f1b") return (P - 1) / (M + P - 1);
  if (name == "interleaved" && m % p == 0) return (P - 1) / (V * M + P - 1);
  if (name == "zb-h1") {
    const double idle = P - 1 + std::max(0.0, P - M);  // fewer micro-batches than ranks: W cannot fill
    return idle / (3 * M + idle);
  }
  if (name == "zb-v" && m >= p) return (P - 1) / (6 * M + P - 1);
  return simulate(make_schedule(name, p, m, v)).bubble;
}

}  // namespace meshtrain::parallel
