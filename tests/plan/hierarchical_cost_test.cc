// Covers src/meshtrain/plan/hierarchical_cost.cc: the hierarchical form of a
// data-parallel collective (docs/math.md (M.70)) against the hand count,
// comm.hierarchical's choice, which groups it applies to, and the step time
// pricing the recorded data-parallel collectives with it.
#include "meshtrain/plan/hierarchical_cost.h"

#include <gtest/gtest.h>

#include "meshtrain/plan/prediction.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"
#include "plan/test_machine.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
using comm::HierarchicalMode;
using comm::OpKind;

namespace {

// Two devices a node; shared memory 100 GB/s at 1 us a round, the link
// 1 GB/s at 10 us.
plan::HardwareProfile two_per_node(bool shared, double intra_gbps = 100) {
  return test_machine("two per node", 2, shared, {.intra_alpha_us = 1, .intra_gbps = intra_gbps, .inter_alpha_us = 10,
                                                  .inter_gbps = 1});
}

const comm::NodeLayout k2x2{2, 2, 0, 0};

}  // namespace

TEST(HierarchicalCost, TheHandCountOfEachOp) {
  const double M = 64.0 * (1 << 20), ai = 1e-6, bi = 1 / 100e9, ae = 10e-6, be = 1 / 1e9;
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "one link a node" : "one link a device");
    const auto hw = two_per_node(shared);
    const double s = shared ? 2 : 1;  // the two local ranks' rings on one link
    // all-reduce: RS(2, M) inside + AR(2, M/2) across + AG(2, M) inside
    EXPECT_NEAR(plan::hierarchical_seconds(OpKind::AllReduce, k2x2, M, hw),
                (ai + M / 2 * bi) + (2 * ae + M / 2 * s * be) + (ai + M / 2 * bi), 1e-12);
    EXPECT_NEAR(plan::hierarchical_seconds(OpKind::ReduceScatter, k2x2, M, hw),
                (ai + M / 2 * bi) + (ae + M / 4 * s * be), 1e-12);
    EXPECT_NEAR(plan::hierarchical_seconds(OpKind::AllGather, k2x2, M, hw),
                (ae + M / 4 * s * be) + (ai + M / 2 * bi), 1e-12);
    // flat: a ring of 4 on the link, 6 rounds and 1.5 M
    EXPECT_NEAR(plan::flat_seconds(OpKind::AllReduce, k2x2, M, hw), 6 * ae + 1.5 * M * be, 1e-12);
  }
}

TEST(HierarchicalCost, AutoTakesTheFasterFormOnAndOffForce) {
  const double M = 64.0 * (1 << 20);
  const auto fast_inside = two_per_node(true), slow_inside = two_per_node(true, 0.1);
  EXPECT_TRUE(plan::runs_hierarchical(HierarchicalMode::Auto, OpKind::AllReduce, k2x2, M, fast_inside));
  // Shared memory slower than the link: the extra pass inside the node loses.
  EXPECT_FALSE(plan::runs_hierarchical(HierarchicalMode::Auto, OpKind::AllReduce, k2x2, M, slow_inside));
  EXPECT_TRUE(plan::runs_hierarchical(HierarchicalMode::On, OpKind::AllReduce, k2x2, M, slow_inside));
  EXPECT_FALSE(plan::runs_hierarchical(HierarchicalMode::Off, OpKind::AllReduce, k2x2, M, fast_inside));
  EXPECT_FALSE(plan::runs_hierarchical(HierarchicalMode::On, OpKind::Broadcast, k2x2, M, fast_inside));
}

TEST(HierarchicalCost, OnlyDataParallelGroupsThatSpanNodesEvenly) {
  const auto hw = two_per_node(false);
  comm::MeshShape dp4{.dp = 4};
  const auto L = plan::data_group_layout(dp4, 3, "dp", hw.devices_per_node);
  ASSERT_TRUE(L);
  EXPECT_EQ(L->str(), "2 nodes x 2 ranks");
  EXPECT_EQ(L->node, 1);
  EXPECT_EQ(L->local_rank, 1);
  EXPECT_FALSE(plan::data_group_layout(dp4, 0, "world", hw.devices_per_node));
  EXPECT_FALSE(plan::data_group_layout(comm::MeshShape{.dp = 2, .tp = 2}, 0, "dp", hw.devices_per_node)) << "one rank a node";
  EXPECT_FALSE(plan::data_group_layout(comm::MeshShape{.dp = 2, .tp = 2}, 0, "tp", hw.devices_per_node));
  EXPECT_FALSE(plan::data_group_layout(comm::MeshShape{.pp = 2, .dp = 2}, 0, "pp", hw.devices_per_node));
  EXPECT_TRUE(plan::data_group_layout(comm::MeshShape{.dp = 2, .cp = 2}, 0, "dp+cp", hw.devices_per_node));
  EXPECT_FALSE(plan::data_group_layout(comm::MeshShape{.dp = 3}, 0, "dp", hw.devices_per_node)) << "nodes of 2 and 1";
}

TEST(HierarchicalCost, TheStepTimePricesTheDataGroupsCollectivesByTheMode) {
  // dp = 4 on two nodes of two: each recorded bucket all-reduce costs (M.70)
  // with comm.hierarchical = on and (M.20) on the link with off.
  const auto hw = two_per_node(true);
  auto cfg = train::with_layout(tiny_train_config(), train::parse_layout("dp=4"));
  double seconds[2] = {0, 0}, want[2] = {0, 0};
  for (int on = 0; on < 2; ++on) {
    cfg.comm.hierarchical = on ? "on" : "off";
    const plan::Prediction p = plan::predict(train::step_inputs(cfg), train::meta_step_recorder(), &hw, false);
    ASSERT_TRUE(p.time);
    seconds[on] = p.time->ranks.at(0).grad_comm_s;
    for (const comm::PlannedOp& op : p.classes.at(0).step.comm.ops())
      if (op.group == "dp" && op.kind == OpKind::AllReduce && op.phase == comm::StepPhase::GradSync)
        want[on] += on ? plan::hierarchical_seconds(op.kind, k2x2, double(op.bytes), hw)
                       : plan::flat_seconds(op.kind, k2x2, double(op.bytes), hw);
  }
  EXPECT_GT(want[1], 0);
  EXPECT_NEAR(seconds[1], want[1], 1e-12);
  EXPECT_NEAR(seconds[0], want[0], 1e-12);
  EXPECT_LT(seconds[1], seconds[0]);
}
