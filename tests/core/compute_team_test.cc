#include "meshtrain/core/compute_team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "meshtrain/core/threading.h"

using namespace meshtrain;

namespace {

// Sets this thread's team size for a test's lifetime.
struct TeamOf {
  explicit TeamOf(int n) : old(compute_threads()) { set_compute_threads(n); }
  ~TeamOf() { set_compute_threads(old); }
  int old;
};

}  // namespace

// Many jobs of few pieces back to back: a member that wakes up late claims
// from whatever job is current, never a piece of a finished one, and never
// one twice.
TEST(ComputeTeam, EveryPieceRunsExactlyOnceAcrossManyJobs) {
  for (int threads : {2, 3, 5}) {
    TeamOf team(threads);
    for (int job = 0; job < 3000; ++job) {
      const int64_t pieces = 2 + job % 7;
      std::vector<std::atomic<int>> ran(static_cast<size_t>(pieces));
      std::atomic<int> bad_slot{0};
      run_pieces(pieces, [&](int64_t p, int slot) {
        ran[size_t(p)].fetch_add(1);
        if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
      });
      for (int64_t p = 0; p < pieces; ++p) ASSERT_EQ(ran[size_t(p)].load(), 1) << threads << " threads, job " << job;
      ASSERT_EQ(bad_slot.load(), 0);
    }
  }
}

// Other members that never run (descheduled by the OS) cost the caller
// nothing but their share: it takes every piece itself and returns. A team
// whose caller waited for all members to arrive would never return here.
TEST(ComputeTeam, TheCallerFinishesAloneWhenNoOtherMemberRuns) {
  TeamOf team(4);
  run_pieces(2, [](int64_t, int) {});  // the members exist
  hold_team_workers_for_testing(true);
  std::atomic<int> by_caller{0}, runs{0};
  run_pieces(64, [&](int64_t, int slot) {
    runs.fetch_add(1);
    if (slot == 0) by_caller.fetch_add(1);
  });
  hold_team_workers_for_testing(false);
  EXPECT_EQ(runs.load(), 64);
  // A member that had just woken for the previous job may claim one piece
  // before it sees the hold.
  EXPECT_GE(by_caller.load(), 64 - 3);
  // Released, they take pieces again (and the job still runs each once).
  std::vector<std::atomic<int>> ran(1000);
  run_pieces(1000, [&](int64_t p, int) { ran[size_t(p)].fetch_add(1); });
  for (auto& r : ran) EXPECT_EQ(r.load(), 1);
}

// A piece that runs pieces of its own runs them inline, on its thread.
TEST(ComputeTeam, PiecesInsideAPieceRunInline) {
  TeamOf team(3);
  std::atomic<int> inner{0}, team_of_one{0};
  run_pieces(6, [&](int64_t, int) {
    EXPECT_TRUE(in_team_piece());
    if (team_threads() == 1) team_of_one.fetch_add(1);
    run_pieces(5, [&](int64_t, int slot) {
      EXPECT_EQ(slot, 0);
      inner.fetch_add(1);
    });
  });
  EXPECT_FALSE(in_team_piece());
  EXPECT_EQ(inner.load(), 30);
  EXPECT_EQ(team_of_one.load(), 6);
}

TEST(ComputeTeam, OneThreadRunsThePiecesInOrder) {
  TeamOf team(1);
  std::vector<int64_t> order;
  run_pieces(5, [&](int64_t p, int slot) {
    EXPECT_EQ(slot, 0);
    order.push_back(p);
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  std::vector<int64_t> gated;
  run_pieces_if(false, 3, [&](int64_t p, int) { gated.push_back(p); });
  EXPECT_EQ(gated, (std::vector<int64_t>{0, 1, 2}));
}
