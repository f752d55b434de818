// Schedules as data (docs/math.md, "Pipeline parallelism"): the validator accepts
// the plain loop and GPipe / 1F1B lists and rejects each kind of broken list naming
// the action; the unit-time simulator gives the fill-drain bubble (M.42), (M.45).
#include "meshtrain/parallel/schedule.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/schedule_gen.h"

using namespace meshtrain;
using parallel::Action;
using parallel::Op;

namespace {

std::string rejection(const parallel::Schedule& s) {
  try {
    parallel::validate(s);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Two ranks, two micro-batches, one chunk each: the frame of a hand list.
parallel::Schedule two_by_two(const std::string& name, std::vector<std::vector<Action>> actions) {
  parallel::Schedule s;
  s.name = name;
  s.ranks = 2;
  s.micro_batches = 2;
  s.chunk_rank = {0, 1};
  s.actions = std::move(actions);
  return s;
}

// GPipe for p = 2, m = 2, written out by hand.
parallel::Schedule hand_gpipe() {
  return two_by_two("hand-gpipe", {
      {{Op::Forward, 0, 0}, {Op::SendActivation, 0, 0, -1, -1, 1}, {Op::Forward, 1, 0},
       {Op::SendActivation, 1, 0, -1, -1, 1}, {Op::RecvGradient, 0, 0, -1, -1, 1}, {Op::Backward, 0, 0},
       {Op::RecvGradient, 1, 0, -1, -1, 1}, {Op::Backward, 1, 0}},
      {{Op::RecvActivation, 0, 1, -1, -1, 0}, {Op::Forward, 0, 1}, {Op::RecvActivation, 1, 1, -1, -1, 0},
       {Op::Forward, 1, 1}, {Op::Backward, 0, 1}, {Op::SendGradient, 0, 1, -1, -1, 0}, {Op::Backward, 1, 1},
       {Op::SendGradient, 1, 1, -1, -1, 0}},
  });
}

// 1F1B for p = 2, m = 2 by hand, with the backward split into B and W.
parallel::Schedule hand_1f1b_split() {
  return two_by_two("hand-1f1b", {
      {{Op::Forward, 0, 0}, {Op::SendActivation, 0, 0, -1, -1, 1}, {Op::Forward, 1, 0},
       {Op::SendActivation, 1, 0, -1, -1, 1}, {Op::RecvGradient, 0, 0, -1, -1, 1}, {Op::BackwardInput, 0, 0},
       {Op::BackwardWeight, 0, 0}, {Op::RecvGradient, 1, 0, -1, -1, 1}, {Op::BackwardInput, 1, 0},
       {Op::BackwardWeight, 1, 0}},
      {{Op::RecvActivation, 0, 1, -1, -1, 0}, {Op::Forward, 0, 1}, {Op::BackwardInput, 0, 1},
       {Op::SendGradient, 0, 1, -1, -1, 0}, {Op::RecvActivation, 1, 1, -1, -1, 0}, {Op::Forward, 1, 1},
       {Op::BackwardInput, 1, 1}, {Op::SendGradient, 1, 1, -1, -1, 0}, {Op::BackwardWeight, 0, 1},
       {Op::BackwardWeight, 1, 1}},
  });
}

}  // namespace

TEST(Schedule, AcceptsThePlainLoopGPipeAnd1F1B) {
  EXPECT_EQ(rejection(hand_gpipe()), "");
  EXPECT_EQ(rejection(hand_1f1b_split()), "");
  EXPECT_EQ(parallel::gpipe_schedule(2, 2).actions, hand_gpipe().actions);
  // One stage, 1F1B: the loop of a single device, F0 BW0 F1 BW1.
  const auto loop = parallel::one_f_one_b_schedule(1, 2);
  EXPECT_EQ(loop.actions[0], (std::vector<Action>{{Op::Forward, 0, 0}, {Op::Backward, 0, 0}, {Op::Forward, 1, 0},
                                                  {Op::Backward, 1, 0}}));
  for (int p : {1, 2, 4})
    for (int m = 1; m <= 8; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      EXPECT_EQ(rejection(parallel::gpipe_schedule(p, m)), "");
      EXPECT_EQ(rejection(parallel::one_f_one_b_schedule(p, m)), "");
      EXPECT_EQ(rejection(parallel::gpipe_schedule(p, m, /*forward_only=*/true)), "");
    }
}

TEST(Schedule, RejectsEachKindOfBrokenList) {
  struct Case {
    std::string what, expect;
    std::function<void(parallel::Schedule&)> edit;
  };
  const std::vector<Case> cases = {
      {"missing forward", "is missing F(mb=1, chunk=1)",
       [](auto& s) { s.actions[1].erase(s.actions[1].begin() + 3); }},
      {"duplicated forward", "action 1 F(mb=0, chunk=0): duplicated (also action 0 on rank 0)",
       [](auto& s) { s.actions[0].insert(s.actions[0].begin() + 1, Action{Op::Forward, 0, 0}); }},
      {"W before its B", "rank 0 action 5 W(mb=0, chunk=0): W before its B",
       [](auto& s) { std::swap(s.actions[0][5], s.actions[0][6]); }},
      {"missing W", "rank 0 is missing W(mb=1, chunk=0)", [](auto& s) { s.actions[0].pop_back(); }},
      {"backward before forward", "rank 1 action 0 BW(mb=0, chunk=1): backward before its forward",
       [](auto& s) { s.actions[1].insert(s.actions[1].begin(), s.actions[1][4]), s.actions[1].erase(s.actions[1].begin() + 5); }},
      {"send before forward", "rank 0 action 0 SendActivation(mb=0, chunk=0, peer=1): sends before its forward",
       [](auto& s) { std::swap(s.actions[0][0], s.actions[0][1]); }},
      {"wrong peer", "the peer must be rank 1", [](auto& s) { s.actions[0][1].peer = 0; }},
      {"needless transfer", "no transfer is needed there",
       [](auto& s) { s.actions[1].push_back(Action{Op::SendActivation, 0, 1, -1, -1, 0}); }},
      {"missing transfer", "needs a SendActivation and a RecvActivation",
       [](auto& s) { s.actions[0].erase(s.actions[0].begin() + 1); }},
      {"micro-batch out of range", "micro-batch outside [0, m)", [](auto& s) { s.actions[0][0].micro = 5; }},
      {"chunk on another rank", "the chunk sits on rank 1", [](auto& s) { s.actions[0][0].chunk = 1; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const bool split = c.what == "W before its B" || c.what == "missing W";
    parallel::Schedule s = split ? hand_1f1b_split() : hand_gpipe();
    c.edit(s);
    const std::string err = rejection(s);
    ASSERT_NE(err, "") << "accepted";
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
}

TEST(Schedule, ADeadlockCycleIsNamedRankByRank) {
  // Both ranks receive before they send: a cycle.
  parallel::Schedule s = hand_gpipe();
  s.actions[1] = {{Op::RecvActivation, 0, 1, -1, -1, 0}, {Op::Forward, 0, 1}, {Op::RecvActivation, 1, 1, -1, -1, 0},
                  {Op::Forward, 1, 1}, {Op::Backward, 1, 1}, {Op::SendGradient, 1, 1, -1, -1, 0},
                  {Op::Backward, 0, 1}, {Op::SendGradient, 0, 1, -1, -1, 0}};
  // Rank 0 wants mb 0's gradient first, rank 1 sends mb 1's first: fine
  // with tags (no deadlock) since sends never block...
  EXPECT_EQ(rejection(s), "");
  // ...but a rank that receives mb 1's activation before sending mb 0's
  // gradient, against a rank that sends mb 1's activation only after that
  // gradient arrives, waits forever.
  s.actions[0] = {{Op::Forward, 0, 0}, {Op::SendActivation, 0, 0, -1, -1, 1}, {Op::RecvGradient, 0, 0, -1, -1, 1},
                  {Op::Backward, 0, 0}, {Op::Forward, 1, 0}, {Op::SendActivation, 1, 0, -1, -1, 1},
                  {Op::RecvGradient, 1, 0, -1, -1, 1}, {Op::Backward, 1, 0}};
  const std::string err = rejection(s);
  EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0 waits at action 2 RecvGradient(mb=0, chunk=0, peer=1)"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1 waits at action 2 RecvActivation(mb=1, chunk=1, peer=0)"), std::string::npos) << err;
}

TEST(Schedule, UnitTimeBubbleAndLiveActivations) {
  // docs/math.md (M.42): p = 4, m = 8 -> utilization 8/11.
  const auto g = parallel::simulate(parallel::gpipe_schedule(4, 8));
  EXPECT_NEAR(1.0 - g.bubble, 8.0 / 11.0, 1e-12);
  EXPECT_EQ(g.peak_live[0], 8);  // GPipe holds every micro-batch
  for (int p : {1, 2, 4})
    for (int m = 1; m <= 8; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const auto gp = parallel::simulate(parallel::gpipe_schedule(p, m));
      const auto ob = parallel::simulate(parallel::one_f_one_b_schedule(p, m));
      EXPECT_NEAR(gp.bubble, double(p - 1) / double(m + p - 1), 1e-12);
      EXPECT_NEAR(ob.bubble, double(p - 1) / double(m + p - 1), 1e-12);
      EXPECT_EQ(gp.peak_live[0], m);
      EXPECT_LE(ob.peak_live[0], std::min(p, m));  // 1F1B: at most p in flight on the first stage
      for (int r = 0; r < p; ++r) EXPECT_LE(ob.peak_live[size_t(r)], std::min(p - r, m));
    }
}
