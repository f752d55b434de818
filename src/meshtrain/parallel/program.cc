#include "meshtrain/parallel/program.h"

#include <algorithm>
#include <map>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

namespace {

bool writes_grads(Op op) { return op == Op::Backward || op == Op::BackwardWeight; }
bool uses_params(Op op) { return op == Op::Forward || op == Op::Backward || op == Op::BackwardInput; }

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Chunk actions -> segment actions.
std::vector<Action> expand_segments(const Schedule& s, int pp_rank, const std::vector<Chunk>& chunks) {
  std::vector<Action> out;
  for (const Action& a : s.actions[size_t(pp_rank)]) {
    const Chunk& c = chunks[size_t(a.chunk)];
    if (!is_compute(a.op)) {
      Action t = a;
      // Transfers carry the segment whose output (or output gradient) moves.
      t.segment = (a.op == Op::SendActivation || a.op == Op::RecvGradient) ? c.last : c.first - 1;
      out.push_back(t);
      continue;
    }
    const bool ascending = a.op == Op::Forward;
    for (int k = 0; k <= c.last - c.first; ++k) {
      Action t = a;
      t.segment = ascending ? c.first + k : c.last - k;
      out.push_back(t);
    }
  }
  return out;
}

}  // namespace

Program expand(const Schedule& schedule, int pp_rank, const std::vector<Chunk>& chunks,
               const std::function<std::vector<int>(int)>& units_of, const ParamPolicy& policy, bool validated) {
  if (!validated) validate(schedule);
  MT_REQUIRE(ConfigError, int(chunks.size()) == schedule.chunks(), "schedule ", schedule.name, " has ",
             schedule.chunks(), " chunks but the layout has ", chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c)
    MT_REQUIRE(ConfigError, chunks[c].pp_rank == schedule.chunk_rank[c], "schedule ", schedule.name, " puts chunk ", c,
               " on pipeline rank ", schedule.chunk_rank[c], " but the layout has it on ", chunks[c].pp_rank);
  const std::vector<Action> seg = expand_segments(schedule, pp_rank, chunks);

  Program prog;
  prog.micro_batches = schedule.micro_batches;
  prog.trains = std::any_of(seg.begin(), seg.end(), [](const Action& a) { return writes_grads(a.op); });

  // Last gradient-writing action of each unit in the window (the count of
  // backward actions per unit decides when its gradient is complete).
  std::map<int, size_t> last_write;
  std::map<std::pair<int, int>, size_t> last_write_of_micro;  // (micro-batch, unit)
  for (size_t i = 0; i < seg.size(); ++i)
    if (writes_grads(seg[i].op))
      for (int u : units_of(seg[i].segment)) last_write[u] = last_write_of_micro[{seg[i].micro, u}] = i;
  // The next parameter-using action after each position (prefetch and release).
  std::vector<int> next_use(seg.size() + 1, -1);
  for (size_t i = seg.size(); i-- > 0;) next_use[i] = uses_params(seg[i].op) ? int(i) : next_use[i + 1];
  std::map<int, size_t> last_use;  // keep_gathered: release there
  for (size_t i = 0; i < seg.size(); ++i)
    if (uses_params(seg[i].op))
      for (int u : units_of(seg[i].segment)) last_use[u] = i;

  auto emit = [&](Op op, int unit) {
    Action a;
    a.op = op;
    a.unit = unit;
    prog.actions.push_back(a);
  };
  for (size_t i = 0; i < seg.size(); ++i) {
    const Action& a = seg[i];
    const bool gathers = policy.gather_params && uses_params(a.op);
    const std::vector<int> mine = gathers ? units_of(a.segment) : std::vector<int>{};
    const int nxt = next_use[i + 1];
    const std::vector<int> next_units = gathers && nxt >= 0 ? units_of(seg[size_t(nxt)].segment) : std::vector<int>{};
    for (int u : mine) emit(Op::Require, u);
    for (int u : next_units)
      if (!contains(mine, u)) emit(Op::Gather, u);
    prog.actions.push_back(a);
    const bool release_now = a.op != Op::Forward || policy.reshard_after_forward || !prog.trains;
    for (int u : mine)
      if (policy.keep_gathered ? last_use.at(u) == i : release_now && !contains(next_units, u)) emit(Op::Release, u);
    if (policy.close_leaves && writes_grads(a.op))
      for (int u : units_of(a.segment))
        if (last_write_of_micro.at({a.micro, u}) == i) {
          emit(Op::CloseLeaf, u);
          prog.actions.back().micro = a.micro;
        }
    if (policy.overlap && writes_grads(a.op))
      for (int u : units_of(a.segment))
        if (last_write.at(u) == i) emit(Op::ReduceGrads, u);
  }
  if (!policy.overlap)
    for (auto it = last_write.rbegin(); it != last_write.rend(); ++it) emit(Op::ReduceGrads, it->first);
  return prog;
}

}  // namespace meshtrain::parallel
