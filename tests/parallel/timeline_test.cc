// Pipeline timelines (timeline.h, timeline_svg.h): the measured bubble and
// the per-chunk median costs of a hand-made timeline, the gather over a
// pipeline group, and the SVG drawing (well-formed, one box per action).
#include "meshtrain/parallel/timeline.h"

#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/comm/launch.h"
#include "meshtrain/parallel/timeline_svg.h"

using namespace meshtrain;
using parallel::Op;

namespace {

// Two stages of 1F1B, p = 2, m = 1, times in seconds from 10.0: stage 0
// runs F [10, 11) and BW [14, 16); stage 1 F [11, 12) and BW [12, 14).
parallel::PipelineTimeline two_stages() {
  parallel::PipelineTimeline t;
  t.schedule = "1f1b";
  t.micro_batches = 1;
  t.stages = {{{Op::Forward, 0, 0, 10, 11, 1}, {Op::Backward, 0, 0, 14, 16, 2}},
              {{Op::Forward, 0, 1, 11, 12, 1}, {Op::Backward, 0, 1, 12, 14, 2}}};
  return t;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(Timeline, MeasuredBubbleAndChunkCosts) {
  parallel::PipelineTimeline t = two_stages();
  // Busy 6 of 2 stages x 6 seconds: bubble 1/2 (= (p-1)/(m+p-1)).
  EXPECT_DOUBLE_EQ(t.measured_bubble(), 0.5);
  t.rebase();
  EXPECT_DOUBLE_EQ(t.stages[0][0].start, 0.0);
  EXPECT_DOUBLE_EQ(t.stages[0][1].end, 6.0);
  const parallel::ChunkCosts c = t.chunk_costs(2);
  EXPECT_EQ(c.f, (std::vector<double>{1, 1}));
  EXPECT_EQ(c.b, (std::vector<double>{2, 2}));  // fused BW counts as B
  EXPECT_EQ(c.w, (std::vector<double>{0, 0}));
  // Parameter waits inside a chunk action are not busy time.
  t.stages[1][1].busy = 1;
  EXPECT_DOUBLE_EQ(t.measured_bubble(), 1.0 - 5.0 / 12.0);
}

// Stage 1 waits for F of micro-batch 0 (chunk 0, ends at 11) over [10.5,
// 11.25): 0.25 s after the sender finished is exposed. Stage 0 waits for
// the gradient from chunk 1's B (ends at 14) over [13, 14): none of it.
// A timeline whose 0 is at 100 on the stages' clock, and one rebased.
TEST(Timeline, ExposedTransferIsTheWaitAfterTheSenderFinished) {
  parallel::PipelineTimeline t = two_stages();
  using W = parallel::ReceiveWait;
  parallel::PipelineTimeline ahead = t;
  ahead.origin = 100.0;
  EXPECT_DOUBLE_EQ(ahead.exposed_transfer({W{Op::RecvActivation, 0, 1, 110.5, 111.25}}), 0.25);
  EXPECT_DOUBLE_EQ(t.exposed_transfer({W{Op::RecvGradient, 0, 0, 13, 14}}), 0.0);
  // A wait that starts after the sender finished is exposed whole.
  EXPECT_DOUBLE_EQ(t.exposed_transfer({W{Op::RecvGradient, 0, 0, 14.5, 14.75}}), 0.25);
  // Both, summed; a receive whose sender is absent counts nothing.
  EXPECT_DOUBLE_EQ(t.exposed_transfer({W{Op::RecvActivation, 0, 1, 10.5, 11.25}, W{Op::RecvGradient, 0, 0, 14.5, 14.75},
                                       W{Op::RecvActivation, 3, 1, 0, 50}}),
                   0.5);
  // Rebased to its first start (10), the timeline keeps the clock's origin.
  t.rebase();
  EXPECT_DOUBLE_EQ(t.origin, 10.0);
  EXPECT_DOUBLE_EQ(t.exposed_transfer({W{Op::RecvActivation, 0, 1, 10.5, 11.25}}), 0.25);
}

TEST(Timeline, GatheredOverThePipelineGroup) {
  const parallel::PipelineTimeline ref = two_stages();
  std::mutex mu;
  parallel::PipelineTimeline got;
  comm::LaunchOptions o;
  o.world_size = 2;
  o.mesh.pp = 2;
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    const int r = ctx.mesh.coord(comm::Axis::Pp);
    const auto t = parallel::gather_timeline(ctx.group("pp"), ref.stages[size_t(r)]);
    std::lock_guard<std::mutex> lock(mu);
    if (r == 1) got = t;
  });
  ASSERT_EQ(got.stages.size(), 2u);
  ASSERT_EQ(got.stages[1].size(), 2u);
  EXPECT_EQ(got.stages[1][1].op, Op::Backward);
  EXPECT_DOUBLE_EQ(got.stages[1][1].start, 2.0);  // rebased to the earliest start
  EXPECT_DOUBLE_EQ(got.measured_bubble(), 0.5);
}

TEST(Timeline, SvgHasOneBoxPerActionAndIsWellFormed) {
  parallel::PipelineTimeline t = two_stages();
  t.rebase();
  const std::string svg = parallel::timeline_svg(t, "1f1b <p=2>");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("1f1b &lt;p=2&gt;"), std::string::npos);  // the title escaped
  EXPECT_EQ(count(svg, "<rect x=") - 4, 4u);                   // 4 actions + 4 legend swatches
  EXPECT_EQ(count(svg, "<rect"), count(svg, "</rect>") + 4);   // legend swatches are self-closed
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_NE(svg.find("stage 1"), std::string::npos);
  EXPECT_NE(svg.find("measured bubble 0.500"), std::string::npos);
}
