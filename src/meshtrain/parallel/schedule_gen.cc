#include "meshtrain/parallel/schedule_gen.h"

#include <algorithm>

#include "meshtrain/core/error.h"

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

Schedule make_schedule(const std::string& name, int p, int m) {
  if (name == "gpipe") return gpipe_schedule(p, m);
  if (name == "1f1b") return one_f_one_b_schedule(p, m);
  MT_THROW(ConfigError, "parallel.schedule = \"", name, "\": expected gpipe or 1f1b");
}

}  // namespace meshtrain::parallel
