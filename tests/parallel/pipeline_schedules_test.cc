// Every generated schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V) for
// p in {1, 2, 4}, m in 1..8, v in {1, 2}: it validates, every chunk takes
// its micro-batches in ascending order in F, B and W (so gradients
// accumulate in the same order under every schedule), the unit-time bubble
// is the closed form stated in schedule_gen.h / schedule_zero_bubble.h, and
// the live activations stay within each schedule's limit. The costed
// simulator follows measured per-chunk times and transfer latency.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/parallel/schedule_list.h"
#include "meshtrain/parallel/schedule_zero_bubble.h"

using namespace meshtrain;
using parallel::Op;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

namespace {

// The micro-batch order of each (op, chunk) in its rank's list.
void expect_ascending_per_chunk(const parallel::Schedule& s) {
  for (int r = 0; r < s.ranks; ++r) {
    std::map<std::pair<int, int>, int> next;  // (op, chunk) -> expected micro-batch
    for (const auto& a : s.actions[size_t(r)]) {
      if (!parallel::is_compute(a.op)) continue;
      const int op = a.op == Op::BackwardInput ? int(Op::Backward) : int(a.op);  // B and BW: the same order
      int& want = next[{op, a.chunk}];
      EXPECT_EQ(a.micro, want) << s.name << " rank " << r << " " << a.str();
      want = a.micro + 1;
    }
  }
}

int peak(const parallel::SimResult& r) { return *std::max_element(r.peak_live.begin(), r.peak_live.end()); }

}  // namespace

TEST(PipelineSchedules, EveryScheduleValidatesInMicroBatchOrder) {
  for (const std::string& name : parallel::schedule_names())
    for (int p : {1, 2, 4})
      for (int v : {1, 2})
        for (int m = 1; m <= 8; ++m) {
          const bool fits = name == "interleaved" ? v >= 2 : name == "zb-v" ? v == 2 : v == 1;
          if (!fits) {
            EXPECT_THROW(parallel::make_schedule(name, p, m, v), ConfigError) << name << " v=" << v;
            continue;
          }
          SCOPED_TRACE(::testing::Message() << name << " p=" << p << " m=" << m << " v=" << v);
          const auto s = parallel::make_schedule(name, p, m, v);
          EXPECT_NO_THROW(parallel::validate(s));
          EXPECT_EQ(s.chunks(), p * v);
          expect_ascending_per_chunk(s);
        }
}

TEST(PipelineSchedules, UnitTimeBubblesAreTheStatedFormulas) {
  for (int p : {1, 2, 4})
    for (int m = 1; m <= 8; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const double P = p, M = m;
      const auto gpipe = parallel::simulate(parallel::make_schedule("gpipe", p, m));
      const auto ofob = parallel::simulate(parallel::make_schedule("1f1b", p, m));
      const auto inter = parallel::simulate(parallel::make_schedule("interleaved", p, m, 2));
      const auto h1 = parallel::simulate(parallel::make_schedule("zb-h1", p, m));
      const auto zbv = parallel::simulate(parallel::make_schedule("zb-v", p, m, 2));
      // docs/math.md (M.42) for fill-drain and 1F1B.
      EXPECT_NEAR(gpipe.bubble, (P - 1) / (M + P - 1), 1e-12);
      EXPECT_NEAR(ofob.bubble, (P - 1) / (M + P - 1), 1e-12);
      // Interleaved, v = 2: the fill and drain shrink to one chunk's time
      // when m is a multiple of p; never worse than 1F1B otherwise.
      if (m % p == 0) {
        EXPECT_NEAR(inter.bubble, (P - 1) / (2 * M + P - 1), 1e-12);
      }
      EXPECT_LE(inter.bubble, ofob.bubble + 1e-12);
      // ZB-H1: (p-1)(F + B - W) of idle per rank for m >= p; with fewer
      // micro-batches each missing one adds one unit.
      const double idle = P - 1 + std::max(0.0, P - M);
      EXPECT_NEAR(h1.bubble, idle / (3 * M + idle), 1e-12);
      // ZB-V: only the start-up is idle for m >= p.
      if (m >= p) {
        EXPECT_NEAR(zbv.bubble, (P - 1) / (6 * M + P - 1), 1e-12);
      }
      EXPECT_LE(zbv.bubble, h1.bubble + 1e-12);
      for (const std::string& name : parallel::schedule_names()) {
        const int v = name == "interleaved" || name == "zb-v" ? 2 : 1;
        EXPECT_NEAR(parallel::bubble_formula(name, p, m, v),
                    parallel::simulate(parallel::make_schedule(name, p, m, v)).bubble, 1e-12)
            << name;
      }
    }
  // The worked example of docs/math.md (M.42): p = 4, m = 8 -> utilization 8/11.
  EXPECT_NEAR(1 - parallel::simulate(parallel::make_schedule("1f1b", 4, 8)).bubble, 8.0 / 11.0, 1e-12);
}

TEST(PipelineSchedules, LiveActivationsStayWithinEachSchedulesLimit) {
  for (int p : {1, 2, 4})
    for (int m = 1; m <= 8; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const auto gpipe = parallel::simulate(parallel::make_schedule("gpipe", p, m));
      const auto ofob = parallel::simulate(parallel::make_schedule("1f1b", p, m));
      EXPECT_EQ(gpipe.peak_live[0], m);  // fill-drain holds every micro-batch
      EXPECT_EQ(ofob.peak_live[0], std::min(p, m));
      for (int r = 0; r < p; ++r) EXPECT_LE(ofob.peak_live[size_t(r)], std::min(p - r, m));
      // ZB-H1: no rank above 1F1B's peak (its first stage's p).
      EXPECT_LE(peak(parallel::simulate(parallel::make_schedule("zb-h1", p, m))), std::min(p, m));
      // ZB-V: 2p chunk activations = p stages' worth, the same peak.
      EXPECT_LE(peak(parallel::simulate(parallel::make_schedule("zb-v", p, m, 2))), std::min(2 * p, 2 * m));
      // Interleaved: 2(p - r - 1) + (v - 1)p + 1 chunk activations on rank r.
      const auto inter = parallel::simulate(parallel::make_schedule("interleaved", p, m, 2));
      for (int r = 0; r < p; ++r) EXPECT_LE(inter.peak_live[size_t(r)], std::min(2 * m, 2 * (p - r - 1) + p + 1));
    }
}

TEST(PipelineSchedules, ZeroBubbleSchedulesSplitTheBackward) {
  const auto h1 = parallel::make_schedule("zb-h1", 4, 8);
  const auto zbv = parallel::make_schedule("zb-v", 4, 8, 2);
  for (const auto* s : {&h1, &zbv})
    for (const auto& list : s->actions)
      for (const auto& a : list) EXPECT_NE(a.op, Op::Backward) << s->name << " " << a.str();
  // ZB-V: rank r holds chunks r and 2p - 1 - r; the first and the last on rank 0.
  EXPECT_EQ(zbv.chunk_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  // Chunks 3 and 4 meet on rank 3: no transfer between them.
  for (const auto& a : zbv.actions[3])
    if (a.op == Op::SendActivation) {
      EXPECT_NE(a.chunk, 3) << a.str();
    }
  EXPECT_EQ(parallel::placement_of("zb-v"), parallel::ChunkPlacement::V);
  EXPECT_EQ(parallel::placement_of("interleaved"), parallel::ChunkPlacement::Loop);
}

TEST(PipelineSchedules, CostedSimulationFollowsChunkTimesAndLatency) {
  // 1F1B, p = 2, m = 1: F0, F1, BW1, BW0 in a chain; each transfer waits L.
  const auto s = parallel::make_schedule("1f1b", 2, 1);
  parallel::ChunkCosts c;
  c.f = {1.0, 2.0};
  c.b = {3.0, 4.0};
  c.w = {0.5, 0.25};
  c.latency = 0.125;
  const auto r = parallel::simulate(s, c);
  EXPECT_DOUBLE_EQ(r.makespan, 1.0 + 0.125 + 2.0 + (4.0 + 0.25) + 0.125 + (3.0 + 0.5));
  // A stage twice as slow sets the beat: GPipe p = 2, m = 4, stage 1's F and
  // B take 2, stage 0's 1 (W = 0): stage 1 is busy from t = 1 to 1 + 4(2 + 2).
  const auto g = parallel::make_schedule("gpipe", 2, 4);
  parallel::ChunkCosts slow;
  slow.f = {1, 2};
  slow.b = {1, 2};
  slow.w = {0, 0};
  EXPECT_DOUBLE_EQ(parallel::simulate(g, slow).makespan, 1 + 16 + 1);
  // Unit costs are the unit-time simulation.
  EXPECT_DOUBLE_EQ(parallel::simulate(g).makespan,
                   parallel::simulate(g, parallel::ChunkCosts{{1, 1}, {1, 1}, {1, 1}, 0}).makespan);
}

TEST(PipelineSchedules, BadScheduleOptionsAreRejectedNamingTheKey) {
  EXPECT_THAT([] { parallel::make_schedule("zb-v", 2, 4, 3); },
              ThrowsMessage<ConfigError>(HasSubstr("exactly 2 chunks per rank")));
  EXPECT_THAT([] { parallel::make_schedule("interleaved", 2, 4, 1); },
              ThrowsMessage<ConfigError>(HasSubstr("virtual_stages >= 2")));
  EXPECT_THAT([] { parallel::make_schedule("1f1b", 2, 4, 2); },
              ThrowsMessage<ConfigError>(HasSubstr("needs schedule = interleaved")));
  EXPECT_THAT([] { parallel::make_schedule("pipedream", 2, 4); },
              ThrowsMessage<ConfigError>(HasSubstr("expected one of gpipe, 1f1b")));
  EXPECT_THAT([] { parallel::make_schedule("1f1b", 2, 0); },
              ThrowsMessage<ConfigError>(HasSubstr("micro-batches = 0")));
}
