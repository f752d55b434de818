#include "meshtrain/parallel/schedule_list.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

namespace {

constexpr int kNotYet = -1;

// Per chunk, per micro-batch: when each compute action finishes (kNotYet
// until it has started), and the next micro-batch each action takes.
struct ChunkState {
  std::vector<int> f_end, b_end;
  int next_f = 0, next_b = 0, next_w = 0;
};

}  // namespace

void add_transfers(Schedule& s) {
  const int C = s.chunks();
  auto rank_of = [&](int c) { return s.chunk_rank[size_t(c)]; };
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<Action> out;
    for (const Action& a : s.actions[size_t(r)]) {
      const bool remote_in = a.chunk > 0 && rank_of(a.chunk - 1) != r;
      const bool remote_out = a.chunk < C - 1 && rank_of(a.chunk + 1) != r;
      switch (a.op) {
        case Op::Forward:
          if (remote_in) out.push_back({Op::RecvActivation, a.micro, a.chunk, -1, -1, rank_of(a.chunk - 1)});
          out.push_back(a);
          if (remote_out) out.push_back({Op::SendActivation, a.micro, a.chunk, -1, -1, rank_of(a.chunk + 1)});
          break;
        case Op::Backward:
        case Op::BackwardInput:
          if (remote_out) out.push_back({Op::RecvGradient, a.micro, a.chunk, -1, -1, rank_of(a.chunk + 1)});
          out.push_back(a);
          if (remote_in) out.push_back({Op::SendGradient, a.micro, a.chunk, -1, -1, rank_of(a.chunk - 1)});
          break;
        default:
          out.push_back(a);
      }
    }
    s.actions[size_t(r)] = std::move(out);
  }
}

Schedule list_schedule(const std::string& name, int p, int m, const std::vector<int>& chunk_rank,
                       const ListPolicy& policy) {
  MT_REQUIRE(ConfigError, p >= 1 && m >= 1, "schedule ", name, ": p = ", p, ", m = ", m, " (both must be >= 1)");
  Schedule s;
  s.name = name;
  s.ranks = p;
  s.micro_batches = m;
  s.chunk_rank = chunk_rank;
  s.actions.resize(size_t(p));
  const int C = s.chunks();
  std::vector<std::vector<int>> chunks_of(static_cast<size_t>(p));
  for (int c = 0; c < C; ++c) chunks_of[size_t(chunk_rank[size_t(c)])].push_back(c);
  std::vector<ChunkState> st(static_cast<size_t>(C));
  for (auto& c : st) c.f_end.assign(size_t(m), kNotYet), c.b_end.assign(size_t(m), kNotYet);
  auto default_key = [](int mb, int c) { return std::array<int, 3>{mb, c, 0}; };
  const auto& fkey = policy.forward_key ? policy.forward_key : default_key;
  const auto& bkey = policy.backward_key ? policy.backward_key : default_key;
  const bool backward = !policy.forward_only;
  std::vector<int> busy_until(size_t(p), 0), live(size_t(p), 0);
  std::vector<bool> last_forward(size_t(p), false);
  size_t remaining = size_t(m) * size_t(C) * (backward ? (policy.split_backward ? 3 : 2) : 1);

  for (int t = 0; remaining > 0; ++t) {
    bool any_busy = false, started = false;
    for (int r = 0; r < p; ++r) {
      if (busy_until[size_t(r)] > t) {
        any_busy = true;
        continue;
      }
      auto done_by_now = [&](int end) { return end != kNotYet && end <= t; };
      // Ready candidates: the next micro-batch of each of the rank's chunks.
      int best_f = -1, best_b = -1, best_w = -1;
      std::array<int, 3> kf{}, kb{};
      for (int c : chunks_of[size_t(r)]) {
        ChunkState& cs = st[size_t(c)];
        const int f = cs.next_f, b = cs.next_b, w = cs.next_w;
        const bool room =
            policy.max_live.empty() || policy.max_live[size_t(r)] == 0 || live[size_t(r)] < policy.max_live[size_t(r)];
        if (f < m && room && (c == 0 || done_by_now(st[size_t(c - 1)].f_end[size_t(f)])) &&
            (best_f < 0 || fkey(f, c) < kf))
          best_f = c, kf = fkey(f, c);
        if (backward && b < m && b < f && (c == C - 1 || done_by_now(st[size_t(c + 1)].b_end[size_t(b)])) &&
            (best_b < 0 || bkey(b, c) < kb))
          best_b = c, kb = bkey(b, c);
        if (backward && policy.split_backward && w < b && (best_w < 0 || w < st[size_t(best_w)].next_w)) best_w = c;
      }
      Action a;
      int dur = 1;
      const bool b_first =
          policy.alternate && best_f >= 0 && best_b >= 0 ? last_forward[size_t(r)] : policy.backward_first;
      if (best_b >= 0 && (b_first || best_f < 0)) {
        ChunkState& cs = st[size_t(best_b)];
        a = {policy.split_backward ? Op::BackwardInput : Op::Backward, cs.next_b, best_b};
        dur = policy.split_backward ? 1 : 2;
        cs.b_end[size_t(cs.next_b++)] = t + dur;
        if (!policy.split_backward) --live[size_t(r)];
      } else if (best_f >= 0) {
        ChunkState& cs = st[size_t(best_f)];
        a = {Op::Forward, cs.next_f, best_f};
        cs.f_end[size_t(cs.next_f++)] = t + 1;
        ++live[size_t(r)];
      } else if (best_w >= 0) {
        a = {Op::BackwardWeight, st[size_t(best_w)].next_w++, best_w};
        --live[size_t(r)];
      } else {
        continue;
      }
      if (a.op != Op::BackwardWeight) last_forward[size_t(r)] = a.op == Op::Forward;
      s.actions[size_t(r)].push_back(a);
      busy_until[size_t(r)] = t + dur;
      --remaining;
      started = any_busy = true;
    }
    MT_CHECK(started || any_busy, "schedule ", name, ": the list policy stalls at time ", t,
             " (a live-activation limit too small for the placement)");
  }
  add_transfers(s);
  return s;
}

}  // namespace meshtrain::parallel
