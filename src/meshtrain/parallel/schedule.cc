#include "meshtrain/parallel/schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

const char* to_string(Op op) {
  switch (op) {
    case Op::Forward: return "F";
    case Op::Backward: return "BW";
    case Op::BackwardInput: return "B";
    case Op::BackwardWeight: return "W";
    case Op::SendActivation: return "SendActivation";
    case Op::RecvActivation: return "RecvActivation";
    case Op::SendGradient: return "SendGradient";
    case Op::RecvGradient: return "RecvGradient";
    case Op::Gather: return "Gather";
    case Op::Require: return "Require";
    case Op::Release: return "Release";
    case Op::ReduceGrads: return "ReduceGrads";
    case Op::CloseLeaf: return "CloseLeaf";
  }
  return "?";
}

bool is_compute(Op op) {
  return op == Op::Forward || op == Op::Backward || op == Op::BackwardInput || op == Op::BackwardWeight;
}

int peer_chunk(Op transfer, int chunk) {
  switch (transfer) {
    case Op::SendActivation:
    case Op::RecvGradient: return chunk + 1;
    case Op::RecvActivation:
    case Op::SendGradient: return chunk - 1;
    default: MT_THROW(Error, "peer_chunk of ", to_string(transfer), ", which is not a transfer");
  }
}

std::string Action::str() const {
  std::string s = std::string(to_string(op)) + "(";
  if (op == Op::Gather || op == Op::Require || op == Op::Release || op == Op::ReduceGrads)
    return s + "unit=" + std::to_string(unit) + ")";
  if (op == Op::CloseLeaf) return s + "mb=" + std::to_string(micro) + ", unit=" + std::to_string(unit) + ")";
  s += "mb=" + std::to_string(micro) + ", chunk=" + std::to_string(chunk);
  if (segment >= 0) s += ", segment=" + std::to_string(segment);
  if (peer >= 0) s += ", peer=" + std::to_string(peer);
  return s + ")";
}

namespace {

// The schedule-level facts the checks and the simulator share.
struct Facts {
  const Schedule& s;
  int C;
  explicit Facts(const Schedule& sched) : s(sched), C(sched.chunks()) {}
  int rank_of(int c) const { return s.chunk_rank[size_t(c)]; }
  bool remote_input(int c) const { return c > 0 && rank_of(c - 1) != rank_of(c); }
  bool remote_grad(int c) const { return c < C - 1 && rank_of(c + 1) != rank_of(c); }
};

[[noreturn]] void reject(const Schedule& s, int rank, size_t index, const Action& a, const std::string& why) {
  MT_THROW(ConfigError, "schedule ", s.name, ": rank ", rank, " action ", index, " ", a.str(), ": ", why);
}

void check_fields(const Facts& f, int r, size_t i, const Action& a) {
  const Schedule& s = f.s;
  if (a.micro < 0 || a.micro >= s.micro_batches) reject(s, r, i, a, "micro-batch outside [0, m)");
  if (a.chunk < 0 || a.chunk >= f.C) reject(s, r, i, a, "chunk outside the schedule's chunks");
  if (f.rank_of(a.chunk) != r) reject(s, r, i, a, "the chunk sits on rank " + std::to_string(f.rank_of(a.chunk)));
  auto expect_peer = [&](bool needed, int peer_chunk) {
    if (!needed) reject(s, r, i, a, "no transfer is needed there (neighbour chunk on the same rank or none)");
    if (a.peer != f.rank_of(peer_chunk))
      reject(s, r, i, a, "the peer must be rank " + std::to_string(f.rank_of(peer_chunk)));
  };
  switch (a.op) {
    case Op::SendActivation:
    case Op::RecvGradient: return expect_peer(f.remote_grad(a.chunk), peer_chunk(a.op, a.chunk));
    case Op::RecvActivation:
    case Op::SendGradient: return expect_peer(f.remote_input(a.chunk), peer_chunk(a.op, a.chunk));
    case Op::Gather:
    case Op::Require:
    case Op::Release:
    case Op::ReduceGrads:
    case Op::CloseLeaf: reject(s, r, i, a, "parameter actions belong to expanded programs, not schedules");
    default: return;
  }
}

using Key = std::tuple<int, int, int>;  // (op, micro, chunk)

double duration(const ChunkCosts& c, const Action& a) {
  const size_t k = size_t(a.chunk);
  switch (a.op) {
    case Op::Forward: return c.f[k];
    case Op::Backward: return c.b[k] + c.w[k];
    case Op::BackwardInput: return c.b[k];
    case Op::BackwardWeight: return c.w[k];
    default: return 0.0;
  }
}

// Runs every rank's list in order with non-blocking sends and blocking
// receives; throws on a use before definition or a deadlock. Calls
// on_run(rank, index, start) for each action with its start time when
// `costs` is given (simulation), else every action takes no time.
template <typename OnRun>
double run_in_order(const Facts& f, const ChunkCosts* costs, OnRun&& on_run) {
  const Schedule& s = f.s;
  const int P = s.ranks;
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> clock(size_t(P), 0.0);
  std::vector<std::map<Key, double>> done(static_cast<size_t>(P));  // action -> finish time
  std::map<Key, double> sent;                          // (send op, mb, chunk) -> time
  auto is_done = [&](int r, Op op, int mb, int c, double* t) {
    auto it = done[size_t(r)].find({int(op), mb, c});
    if (it == done[size_t(r)].end()) return false;
    *t = std::max(*t, it->second);
    return true;
  };
  auto backward_done = [&](int r, int mb, int c, double* t) {
    return is_done(r, Op::Backward, mb, c, t) || is_done(r, Op::BackwardInput, mb, c, t);
  };
  size_t remaining = 0;
  for (const auto& l : s.actions) remaining += l.size();
  double makespan = 0;
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < P; ++r) {
      while (next[size_t(r)] < s.actions[size_t(r)].size()) {
        const size_t i = next[size_t(r)];
        const Action& a = s.actions[size_t(r)][i];
        double ready = clock[size_t(r)];
        bool blocked = false;
        switch (a.op) {
          case Op::Forward:
            if (a.chunk > 0) {
              const bool ok = f.remote_input(a.chunk) ? is_done(r, Op::RecvActivation, a.micro, a.chunk, &ready)
                                                      : is_done(r, Op::Forward, a.micro, a.chunk - 1, &ready);
              if (!ok) reject(s, r, i, a, "its input (the previous chunk's output) is not on this rank yet");
            }
            break;
          case Op::Backward:
          case Op::BackwardInput: {
            double t = 0;
            if (!is_done(r, Op::Forward, a.micro, a.chunk, &t)) reject(s, r, i, a, "backward before its forward");
            ready = std::max(ready, t);
            if (a.chunk < f.C - 1) {
              const bool ok = f.remote_grad(a.chunk) ? is_done(r, Op::RecvGradient, a.micro, a.chunk, &ready)
                                                     : backward_done(r, a.micro, a.chunk + 1, &ready);
              if (!ok) reject(s, r, i, a, "the gradient of its output is not on this rank yet");
            }
            break;
          }
          case Op::BackwardWeight:
            if (!is_done(r, Op::BackwardInput, a.micro, a.chunk, &ready)) reject(s, r, i, a, "W before its B");
            break;
          case Op::SendActivation:
            if (!is_done(r, Op::Forward, a.micro, a.chunk, &ready)) reject(s, r, i, a, "sends before its forward");
            break;
          case Op::SendGradient:
            if (!backward_done(r, a.micro, a.chunk, &ready)) reject(s, r, i, a, "sends before its backward");
            break;
          case Op::RecvActivation:
          case Op::RecvGradient: {
            const Op send = a.op == Op::RecvActivation ? Op::SendActivation : Op::SendGradient;
            auto it = sent.find({int(send), a.micro, peer_chunk(a.op, a.chunk)});
            if (it == sent.end()) blocked = true;
            else ready = std::max(ready, it->second + (costs ? costs->latency : 0.0));
            break;
          }
          default: break;
        }
        if (blocked) break;
        const double dur = costs ? duration(*costs, a) : 0.0;
        on_run(r, i, ready);
        const double end = ready + dur;
        clock[size_t(r)] = end;
        makespan = std::max(makespan, end);
        done[size_t(r)][{int(a.op), a.micro, a.chunk}] = end;
        if (a.op == Op::SendActivation || a.op == Op::SendGradient) sent[{int(a.op), a.micro, a.chunk}] = end;
        ++next[size_t(r)];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::string why;
      for (int r = 0; r < P; ++r)
        if (next[size_t(r)] < s.actions[size_t(r)].size())
          why += " rank " + std::to_string(r) + " waits at action " + std::to_string(next[size_t(r)]) + " " +
                 s.actions[size_t(r)][next[size_t(r)]].str() + ";";
      MT_THROW(ConfigError, "schedule ", s.name, ": deadlock, no rank can proceed:", why);
    }
  }
  return makespan;
}

}  // namespace

void validate(const Schedule& s) {
  MT_REQUIRE(ConfigError, s.ranks >= 1 && int(s.actions.size()) == s.ranks, "schedule ", s.name, ": ",
             s.actions.size(), " action lists for ", s.ranks, " ranks");
  MT_REQUIRE(ConfigError, s.micro_batches >= 1 && s.chunks() >= 1, "schedule ", s.name,
             ": needs at least one micro-batch and one chunk");
  for (int c = 0; c < s.chunks(); ++c)
    MT_REQUIRE(ConfigError, s.chunk_rank[size_t(c)] >= 0 && s.chunk_rank[size_t(c)] < s.ranks, "schedule ", s.name,
               ": chunk ", c, " on rank ", s.chunk_rank[size_t(c)], " outside [0, ", s.ranks, ")");
  const Facts f(s);
  // Every action where it belongs, and each one exactly once.
  std::map<Key, std::pair<int, size_t>> seen;
  for (int r = 0; r < s.ranks; ++r)
    for (size_t i = 0; i < s.actions[size_t(r)].size(); ++i) {
      const Action& a = s.actions[size_t(r)][i];
      check_fields(f, r, i, a);
      auto [it, fresh] = seen.insert({{int(a.op), a.micro, a.chunk}, {r, i}});
      if (!fresh)
        reject(s, r, i, a, "duplicated (also action " + std::to_string(it->second.second) + " on rank " +
                               std::to_string(it->second.first) + ")");
    }
  auto has = [&](Op op, int mb, int c) { return seen.count({int(op), mb, c}) > 0; };
  bool any_backward = false;
  for (const auto& [k, where] : seen)
    any_backward = any_backward || (std::get<0>(k) != int(Op::Forward) && is_compute(Op(std::get<0>(k))));
  for (int mb = 0; mb < s.micro_batches; ++mb)
    for (int c = 0; c < f.C; ++c) {
      const std::string what = "(mb=" + std::to_string(mb) + ", chunk=" + std::to_string(c) + ")";
      const int r = f.rank_of(c);
      MT_REQUIRE(ConfigError, has(Op::Forward, mb, c), "schedule ", s.name, ": rank ", r, " is missing F", what);
      if (any_backward) {
        const bool fused = has(Op::Backward, mb, c), b = has(Op::BackwardInput, mb, c),
                   w = has(Op::BackwardWeight, mb, c);
        MT_REQUIRE(ConfigError, fused != (b || w), "schedule ", s.name, ": rank ", r,
                   fused ? " has both BW and B/W for " : " is missing the backward of ", what);
        MT_REQUIRE(ConfigError, fused || (b && w), "schedule ", s.name, ": rank ", r, " is missing ", b ? "W" : "B",
                   what);
      }
      if (f.remote_input(c)) {
        MT_REQUIRE(ConfigError, has(Op::SendActivation, mb, c - 1) && has(Op::RecvActivation, mb, c), "schedule ",
                   s.name, ": the activation of (mb=", mb, ", chunk=", c - 1, ") to rank ", r,
                   " needs a SendActivation and a RecvActivation");
        if (any_backward)
          MT_REQUIRE(ConfigError, has(Op::SendGradient, mb, c) && has(Op::RecvGradient, mb, c - 1), "schedule ",
                     s.name, ": the gradient of (mb=", mb, ", chunk=", c, ") to rank ", f.rank_of(c - 1),
                     " needs a SendGradient and a RecvGradient");
      }
    }
  run_in_order(f, nullptr, [](int, size_t, double) {});
}

SimResult simulate(const Schedule& s, double fwd, double bwd, double wgt) {
  ChunkCosts c;
  c.f.assign(size_t(s.chunks()), fwd);
  c.b.assign(size_t(s.chunks()), bwd);
  c.w.assign(size_t(s.chunks()), wgt);
  return simulate(s, c);
}

SimResult simulate(const Schedule& s, const ChunkCosts& costs) {
  validate(s);
  const Facts f(s);
  const size_t C = size_t(s.chunks());
  MT_REQUIRE(ConfigError, costs.f.size() == C && costs.b.size() == C && costs.w.size() == C, "schedule ", s.name,
             ": costs for ", costs.f.size(), " chunks, the schedule has ", C);
  double busy = 0;
  SimResult res;
  res.peak_live.assign(size_t(s.ranks), 0);
  std::vector<int> live(size_t(s.ranks), 0);
  res.makespan = run_in_order(f, &costs, [&](int r, size_t i, double) {
    const Action& a = s.actions[size_t(r)][i];
    busy += duration(costs, a);
    // Activations are held from F until the weight gradient no longer needs them.
    if (a.op == Op::Forward) res.peak_live[size_t(r)] = std::max(res.peak_live[size_t(r)], ++live[size_t(r)]);
    if (a.op == Op::Backward || a.op == Op::BackwardWeight) --live[size_t(r)];
  });
  res.bubble = res.makespan > 0 ? 1.0 - busy / (double(s.ranks) * res.makespan) : 0.0;
  return res;
}

}  // namespace meshtrain::parallel
