// Step programs (program.h): chunks expanded into segments, each unit's
// gradient reduced once right after its last backward of the window
// (counted, so a unit written by two segments — the tied head — waits for
// both), and ZeRO-3 parameters required before every use, prefetched in
// the schedule's order and released when the next action does not use them.
#include "meshtrain/parallel/program.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/schedule_gen.h"

using namespace meshtrain;
using parallel::Op;

namespace {

// A 2-block model: segments 0 (embedding), 1, 2, 3 (head); the head also
// writes unit 0 when tied.
std::function<std::vector<int>(int)> units(bool tied) {
  return [tied](int s) { return tied && s == 3 ? std::vector<int>{3, 0} : std::vector<int>{s}; };
}

parallel::Program program(const parallel::Schedule& s, int rank, bool tied, parallel::ParamPolicy policy) {
  return parallel::expand(s, rank, parallel::pipeline_chunks(2, s.ranks, 1, {}), units(tied), policy);
}

}  // namespace

TEST(Program, EachUnitIsReducedOnceAfterItsLastBackward) {
  for (bool tied : {false, true})
    for (int m : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "tied=" << tied << " m=" << m);
      const auto prog = program(parallel::one_f_one_b_schedule(1, m), 0, tied, {});
      std::map<int, int> writes_left, reduced;
      for (int s = 0; s < 4; ++s)
        for (int u : units(tied)(s)) writes_left[u] += m;
      for (const auto& a : prog.actions) {
        if (a.op == Op::Backward)
          for (int u : units(tied)(a.segment)) {
            EXPECT_EQ(reduced[u], 0) << "unit " << u << " written after its reduction";
            --writes_left[u];
          }
        if (a.op == Op::ReduceGrads) {
          EXPECT_EQ(writes_left[a.unit], 0) << "unit " << a.unit << " reduced before its last backward";
          ++reduced[a.unit];
        }
      }
      for (int u = 0; u < 4; ++u) EXPECT_EQ(reduced[u], 1) << "unit " << u;
      // Overlap: unit 3 (head) goes first, the embedding last; with the tied
      // head the embedding waits for both of its writers.
      EXPECT_EQ(prog.actions.back().op, Op::ReduceGrads);
      EXPECT_EQ(prog.actions.back().unit, 0);
    }
}

// Zero-bubble schedules split the backward: the weight gradient (W) comes
// after the input gradient (B), often much later, so a unit's reduction must
// wait for its last W, not its last B (a reduction racing the last weight
// gradient corrupted gradients elsewhere). Every schedule with split
// backwards, on every pipeline rank, chunks placed as the schedule runs them
// (zb-v: V), with ZeRO-3 parameters: each unit is reduced once, after every
// action that writes it, and its parameters are bound for every action that
// reads them (W reads none).
TEST(Program, SplitBackwardsReduceEachUnitAfterItsLastWeightGradient) {
  const int layers = 4, head = layers + 1;
  for (std::string name : {"zb-h1", "zb-v"})
    for (bool tied : {false, true})
      for (int rank : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << name << " tied=" << tied << " rank=" << rank);
        const int v = name == "zb-v" ? 2 : 1, m = 4;
        const auto schedule = parallel::make_schedule(name, 2, m, v);
        const auto chunks = parallel::pipeline_chunks(layers, 2, v, {}, parallel::placement_of(name));
        auto units_of = [&](int s) { return tied && s == head ? std::vector<int>{head, 0} : std::vector<int>{s}; };
        const auto prog = parallel::expand(schedule, rank, chunks, units_of, parallel::ParamPolicy{true, true, true});
        std::map<int, int> writes, weight_writes;
        for (const auto& a : prog.actions)
          if (a.op == Op::Backward || a.op == Op::BackwardWeight)
            for (int u : units_of(a.segment)) ++writes[u], weight_writes[u] += a.op == Op::BackwardWeight;
        ASSERT_FALSE(writes.empty());
        std::map<int, int> seen, reduced;
        std::set<int> bound;
        for (const auto& a : prog.actions) {
          switch (a.op) {
            case Op::Require: bound.insert(a.unit); break;
            case Op::Release: bound.erase(a.unit); break;
            case Op::Forward:
            case Op::BackwardInput:
              for (int u : units_of(a.segment)) EXPECT_TRUE(bound.count(u)) << a.str() << " without unit " << u;
              break;
            case Op::Backward:
            case Op::BackwardWeight:
              for (int u : units_of(a.segment)) {
                EXPECT_EQ(reduced[u], 0) << a.str() << " writes unit " << u << " after its reduction";
                ++seen[u];
              }
              break;
            case Op::ReduceGrads:
              EXPECT_EQ(seen[a.unit], writes[a.unit]) << "unit " << a.unit << " reduced before its last write";
              ++reduced[a.unit];
              break;
            default: break;
          }
        }
        for (const auto& [u, n] : writes) {
          EXPECT_EQ(reduced[u], 1) << "unit " << u;
          EXPECT_EQ(weight_writes[u], n) << "unit " << u << ": every write is a split weight gradient";
        }
      }
}

TEST(Program, WithoutOverlapEveryReductionWaitsForTheEnd) {
  parallel::ParamPolicy p;
  p.overlap = false;
  const auto prog = program(parallel::one_f_one_b_schedule(1, 2), 0, false, p);
  std::vector<int> tail;
  for (size_t i = prog.actions.size() - 4; i < prog.actions.size(); ++i) {
    EXPECT_EQ(prog.actions[i].op, Op::ReduceGrads);
    tail.push_back(prog.actions[i].unit);
  }
  EXPECT_EQ(tail, (std::vector<int>{3, 2, 1, 0}));
}

TEST(Program, Zero3ParametersArePresentForEveryUseAndNeverLeak) {
  for (bool reshard : {true, false})
    for (bool tied : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "reshard=" << reshard << " tied=" << tied);
      parallel::ParamPolicy p{true, reshard, true};
      const auto prog = program(parallel::one_f_one_b_schedule(1, 2), 0, tied, p);
      std::set<int> gathered, bound;
      int gathers = 0;
      for (const auto& a : prog.actions) {
        switch (a.op) {
          case Op::Gather: gathered.insert(a.unit), ++gathers; break;
          case Op::Require: gathered.insert(a.unit), bound.insert(a.unit); break;
          case Op::Release: gathered.erase(a.unit), bound.erase(a.unit); break;
          case Op::Forward:
          case Op::Backward:
            for (int u : units(tied)(a.segment)) EXPECT_TRUE(bound.count(u)) << a.str() << " without unit " << u;
            break;
          default: break;
        }
      }
      EXPECT_TRUE(gathered.empty()) << "units left gathered after the window";
      EXPECT_GT(gathers, 0) << "prefetches are issued ahead of use";
    }
}

TEST(Program, ForwardOnlyProgramsHaveNoReductions) {
  const auto prog = program(parallel::gpipe_schedule(1, 1, /*forward_only=*/true), 0, false, {true, false, true});
  EXPECT_FALSE(prog.trains);
  std::set<int> gathered;
  for (const auto& a : prog.actions) {
    EXPECT_NE(a.op, Op::ReduceGrads);
    if (a.op == Op::Require) gathered.insert(a.unit);
    if (a.op == Op::Release) gathered.erase(a.unit);
  }
  EXPECT_TRUE(gathered.empty()) << "forward-only passes release what they gather, whatever the reshard policy";
}

TEST(Program, PipelineRanksGetTheirChunksWithTransfers) {
  const auto s = parallel::one_f_one_b_schedule(2, 2);
  const auto first = program(s, 0, false, {}), last = program(s, 1, false, {});
  auto count = [](const parallel::Program& p, Op op) {
    return std::count_if(p.actions.begin(), p.actions.end(), [&](const auto& a) { return a.op == op; });
  };
  EXPECT_EQ(count(first, Op::Forward), 2 * 2);  // 2 micro-batches x segments 0, 1
  EXPECT_EQ(count(last, Op::Forward), 2 * 2);   // segments 2, 3
  EXPECT_EQ(count(first, Op::SendActivation), 2);
  EXPECT_EQ(count(last, Op::RecvActivation), 2);
  EXPECT_EQ(count(first, Op::RecvGradient), 2);
  EXPECT_EQ(count(last, Op::SendGradient), 2);
  for (const auto& a : first.actions)
    if (a.op == Op::ReduceGrads) { EXPECT_LT(a.unit, 2) << "a rank reduces only its own units"; }
}

TEST(Program, KeepGatheredGathersEachUnitOncePerWindow) {
  // 1F1B over 4 micro-batches on one stage: every unit is used 8 times.
  parallel::ParamPolicy keep{.gather_params = true, .keep_gathered = true}, per_use{.gather_params = true};
  auto gathers = [](const parallel::Program& p) {
    std::map<int, int> n;
    std::set<int> bound;
    for (const auto& a : p.actions) {
      if (a.op == Op::Require && !bound.count(a.unit)) ++n[a.unit], bound.insert(a.unit);
      if (a.op == Op::Release) bound.erase(a.unit);
    }
    EXPECT_TRUE(bound.empty()) << "released at the end of the window";
    return n;
  };
  const auto kept = gathers(program(parallel::one_f_one_b_schedule(1, 4), 0, false, keep));
  const auto each = gathers(program(parallel::one_f_one_b_schedule(1, 4), 0, false, per_use));
  for (int u = 0; u < 4; ++u) {
    EXPECT_EQ(kept.at(u), 1) << "unit " << u;
    EXPECT_GT(each.at(u), 1) << "unit " << u;
  }
}
