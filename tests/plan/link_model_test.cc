// Covers src/meshtrain/plan/link_bench.cc (the alpha-beta fit) and the
// node placement and link pricing of plan/step_time.cc (ranks_per_node,
// crosses_nodes, group_link): the mesh's ranks fill the nodes in order, tp
// innermost, and a group's collectives are priced on the link it crosses
// (docs/planning.md, "Nodes and links").
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/formulas.h"
#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/link_bench.h"
#include "meshtrain/plan/prediction.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"
#include "plan/test_machine.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

namespace {

// Samples of docs/math.md (M.20) itself at 256 B to 16 MiB.
std::vector<plan::LinkSample> formula_samples(comm::OpKind op, int R, double alpha, double bytes_per_s) {
  std::vector<plan::LinkSample> out;
  for (size_t bytes = 256; bytes <= (size_t(16) << 20); bytes *= 4)
    out.push_back({op, bytes, plan::ring_time(op, R, double(bytes), alpha, 1.0 / bytes_per_s)});
  return out;
}

plan::StepInputs inputs(const std::string& layout, int nodes) {
  plan::StepInputs in = train::step_inputs(train::with_layout(tiny_train_config(), train::parse_layout(layout)));
  in.nodes = nodes;
  return in;
}

// Two devices a node; the inter-node link ten times slower than the one
// inside, no latency, so a collective's time is its bytes over the rate.
// `inter_extra`: more of [link.inter].
plan::HardwareProfile two_links(const std::string& inter_extra = "", bool shared = false) {
  const TestLinks links{.intra_alpha_us = 0, .intra_gbps = 10, .inter_alpha_us = 0, .inter_gbps = 1};
  return plan::parse_hardware(test_machine_toml("two links", 2, shared, links) + inter_extra, "two-links.toml");
}

double tp_seconds(const std::string& layout, int nodes, const plan::HardwareProfile& hw) {
  const plan::Prediction p = plan::predict(inputs(layout, nodes), train::meta_step_recorder(), &hw, false);
  return p.time->ranks.front().tp_comm_s;
}

}  // namespace

// Noise-free times of the formula give back its alpha and beta, for every
// collective the planner prices and two group sizes.
TEST(LinkFit, RecoversTheFormulasAlphaAndBeta) {
  for (comm::OpKind op : plan::priced_ops())
    for (int R : {2, 4}) {
      const plan::AlphaBeta ab = plan::fit_link(op, R, formula_samples(op, R, 30e-6, 1e8));
      EXPECT_NEAR(ab.alpha_s, 30e-6, 1e-12) << comm::op_kind_name(op) << " R=" << R;
      EXPECT_NEAR(ab.bytes_per_s / 1e8, 1.0, 1e-9) << comm::op_kind_name(op) << " R=" << R;
    }
}

// A busy machine's delay of one small message does not set the latency
// (the fastest of the three smallest does); a shaper's burst that lets
// small messages through faster than the sustained rate leaves the slope
// to the large messages, and alpha cannot fall below 0.1 us. Times that do
// not grow with the size: the largest message's rate.
TEST(LinkFit, SmallMessagesSetTheLatencyAndLargeOnesTheRate) {
  auto samples = formula_samples(comm::OpKind::AllReduce, 2, 50e-6, 5e7);
  samples.front().seconds = 0.1;  // a delayed smallest message
  plan::AlphaBeta ab = plan::fit_link(comm::OpKind::AllReduce, 2, samples);
  EXPECT_NEAR(ab.alpha_s / 50e-6, 1.0, 0.05);
  EXPECT_NEAR(ab.bytes_per_s / 5e7, 1.0, 0.01);
  samples = formula_samples(comm::OpKind::AllReduce, 2, 50e-6, 5e7);
  for (int i = 0; i < 3; ++i) samples[size_t(i)].seconds = 1e-6;  // far below the line
  ab = plan::fit_link(comm::OpKind::AllReduce, 2, samples);
  EXPECT_EQ(ab.alpha_s, 1e-7);
  EXPECT_NEAR(ab.bytes_per_s / 5e7, 1.0, 0.01);
  const std::vector<plan::LinkSample> flat = {{comm::OpKind::Send, 256, 2e-3}, {comm::OpKind::Send, 1024, 1e-3}};
  EXPECT_NEAR(plan::fit_link(comm::OpKind::Send, 2, flat).bytes_per_s, 1024 / 1e-3, 1e-6);
}

// Numbered node by node with tp innermost: dp=2 x tp=2 on 2 nodes keeps tp
// inside a node and dp across; tp=2 on 2 nodes of one rank spans them.
TEST(NodePlacement, RanksFillTheNodesInMeshOrder) {
  const plan::StepInputs dp_tp = inputs("dp=2,tp=2", 2);
  EXPECT_EQ(plan::ranks_per_node(dp_tp, nullptr), 2);
  EXPECT_FALSE(plan::crosses_nodes(dp_tp, 0, "tp", nullptr));
  EXPECT_TRUE(plan::crosses_nodes(dp_tp, 0, "dp", nullptr));
  EXPECT_TRUE(plan::axes_across_nodes(dp_tp, nullptr, plan::kLayerAxes).empty());
  const plan::StepInputs tp = inputs("tp=2", 2);
  EXPECT_TRUE(plan::crosses_nodes(tp, 0, "tp", nullptr));
  EXPECT_EQ(plan::axes_across_nodes(tp, nullptr, plan::kLayerAxes), std::vector<std::string>{"tp"});
  // pp=2 x dp=2: dp {0,1} inside, pp {0,2} across.
  const plan::StepInputs pp_dp = inputs("pp=2,dp=2", 2);
  EXPECT_FALSE(plan::crosses_nodes(pp_dp, 1, "dp", nullptr));
  EXPECT_TRUE(plan::crosses_nodes(pp_dp, 1, "pp", nullptr));
  // Without --nodes: nodes of the profile's devices (a GPU node), or one.
  const plan::HardwareProfile hw = two_links();
  EXPECT_EQ(plan::ranks_per_node(inputs("dp=4", 0), &hw), 2);
  EXPECT_EQ(plan::ranks_per_node(inputs("dp=4", 0), nullptr), 4);
  EXPECT_THAT([&] { plan::ranks_per_node(inputs("dp=4", 1), &hw); },
              ThrowsMessage<ConfigError>(HasSubstr("--nodes 1 puts 4 ranks")));
  EXPECT_THAT([&] { inputs("dp=4", 3).validate(); }, ThrowsMessage<ConfigError>(HasSubstr("--nodes 3")));
}

// A tp group across nodes is priced on the inter-node link: ten times the
// time of the same group inside a node on this profile.
TEST(LinkPricing, CrossNodeTensorParallelismIsPricedOnTheInterNodeLink) {
  const plan::HardwareProfile hw = two_links();
  const double inside = tp_seconds("tp=2", 1, hw), across = tp_seconds("tp=2", 2, hw);
  EXPECT_GT(inside, 0);
  EXPECT_NEAR(across / inside, 10.0, 1e-6);
}

// A shared node's one link (node.shared): a group with one rank a node of
// two shares it with the other place's group, a group with both ranks of
// each node has it alone; a device with a link of its own (not shared)
// always has it whole.
TEST(LinkPricing, ASharedNodesLinkIsSplitBetweenTheGroupsCrossingIt) {
  const plan::HardwareProfile shared = two_links("", /*shared=*/true), own = two_links();
  EXPECT_EQ(plan::group_link(inputs("dp=2,tp=2", 2), 0, "dp", shared).share, 0.5);
  EXPECT_EQ(plan::group_link(inputs("pp=2,tp=2", 2), 1, "pp", shared).share, 0.5);
  EXPECT_EQ(plan::group_link(inputs("dp=4", 2), 0, "dp", shared).share, 1.0);
  EXPECT_EQ(plan::group_link(inputs("dp=2,tp=2", 2), 0, "tp", shared).link, &shared.intra);  // inside a node
  EXPECT_EQ(plan::group_link(inputs("dp=2,tp=2", 2), 0, "dp", own).share, 1.0);
  // dp=2 x tp=2: each dp group's reduction takes twice as long on the shared
  // link (beside the tp group's small sums inside the node).
  const plan::StepInputs in = inputs("dp=2,tp=2", 2);
  const auto grads = [&](const plan::HardwareProfile& hw) {
    return plan::predict(in, train::meta_step_recorder(), &hw, false).time->ranks.front().grad_comm_s;
  };
  EXPECT_NEAR(grads(shared) / grads(own), 2.0, 0.01);
  // Figures measured as one of 2 streams at once (shared_by = 2, bench
  // machine --hostfile): two streams get them as measured, one twice them.
  const plan::HardwareProfile measured = two_links("shared_by = 2\n", /*shared=*/true);
  EXPECT_EQ(plan::group_link(inputs("dp=2,tp=2", 2), 0, "dp", measured).share, 1.0);
  EXPECT_EQ(plan::group_link(inputs("dp=4", 2), 0, "dp", measured).share, 2.0);  // one stream a node
  EXPECT_EQ(plan::crossing_link(measured, 1, 1).share, 2.0);
  EXPECT_THAT([] { two_links("shared_by = 0.5\n", true); }, ThrowsMessage<ConfigError>(HasSubstr("link.inter.shared_by")));
}

// A group holding every rank of each node it spans (dp=4 on 2 nodes of 2;
// tp=2 on 2 nodes of 1) is priced on [link.inter.whole_nodes] where the
// profile has it, whole; a group of one rank a node on [link.inter], shared.
TEST(LinkPricing, WholeNodeGroupsHaveFiguresOfTheirOwn) {
  const plan::HardwareProfile hw = two_links("[link.inter.whole_nodes]\nalpha_us = 0\nbandwidth_gbps = 0.5\n");
  ASSERT_TRUE(hw.inter.whole_nodes);
  const plan::GroupLink whole = plan::group_link(inputs("dp=4", 2), 0, "dp", hw);
  EXPECT_EQ(whole.link, hw.inter.whole_nodes.get());
  EXPECT_EQ(whole.share, 1.0);
  const plan::GroupLink one = plan::group_link(inputs("dp=2,tp=2", 2), 0, "dp", hw);
  EXPECT_EQ(one.link, &hw.inter);
  EXPECT_EQ(plan::group_link(inputs("dp=2,tp=2", 2), 0, "tp", hw).link, &hw.intra);
  // tp=2 on 2 nodes of one rank: 0.5 GB/s against the link's 1.
  EXPECT_NEAR(tp_seconds("tp=2", 2, hw) / tp_seconds("tp=2", 2, two_links()), 2.0, 1e-3);
}

// Ranks that outnumber their node's cores (one core, two ranks a node):
// the two data-parallel replicas of a stage on one node fill each other's
// pipeline bubble, so the makespan is the busy time plus half the bubble a
// node of its own per rank would have (docs/math.md (M.72)): at half the
// speed, 2 busy + (2 span - 2 busy) / 2 = busy + span of the 4-node run.
// A tensor-parallel pair on one node waits for itself and keeps the whole
// bubble.
TEST(LinkPlacement, ReplicasSharingANodesCoresFillEachOthersBubble) {
  // Free links: no transfer time that would not halve with the speed.
  const plan::HardwareProfile hw =
      test_machine("one core", 1, true, {.intra_alpha_us = 0, .intra_gbps = 1e9, .inter_alpha_us = 0, .inter_gbps = 1e9});
  const auto time = [&](const std::string& layout, int nodes) {
    return *plan::predict(inputs(layout, nodes), train::meta_step_recorder(), &hw, false).time;
  };
  const plan::StepTime own = time("pp=2,dp=2", 4), shared = time("pp=2,dp=2", 2);
  ASSERT_GT(own.bubble, 0.05);
  EXPECT_NEAR(shared.makespan_s / (own.makespan_s * (2.0 - own.bubble)), 1.0, 1e-9);
  EXPECT_LT(shared.bubble, own.bubble);
  const plan::StepTime tp_own = time("pp=2,tp=2", 4), tp_shared = time("pp=2,tp=2", 2);
  EXPECT_NEAR(tp_shared.bubble, tp_own.bubble, 1e-9);
}

// A pipeline transfer arrives its link's time after the send, and the
// schedule waits for it: at least the first activation and the last
// gradient lie on the path of pp=2 across a link of 1 ms latency.
TEST(LinkPlacement, PipelineTransfersAcrossTheLinkLengthenTheSchedule) {
  const auto time = [&](double inter_alpha_us) {
    const plan::HardwareProfile hw = test_machine(
        "link", 1, false, {.intra_alpha_us = 0, .intra_gbps = 1e9, .inter_alpha_us = inter_alpha_us, .inter_gbps = 1e9});
    return *plan::predict(inputs("pp=2", 2), train::meta_step_recorder(), &hw, false).time;
  };
  const plan::StepTime fast = time(0), slow = time(1000);
  EXPECT_GT(slow.ranks.front().pp_comm_s, 1e-3);
  EXPECT_GE(slow.makespan_s - fast.makespan_s, 2e-3 * (1 - 1e-9));
}
