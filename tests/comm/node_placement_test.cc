// The node of each rank decides the mesh's order (node_placement.h): tp and
// cp groups inside a node, refused when they cannot be, allowed on request.
#include "meshtrain/comm/node_placement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <mutex>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/error.h"
#include "support/scoped_env.h"

namespace meshtrain::comm {
namespace {

using Hosts = std::vector<std::string>;

TEST(NodePlacement, OrderIsNodeMajorAndStableWithinANode) {
  // mpirun --map-by node: ranks alternate between the nodes.
  EXPECT_EQ(node_major_order(Hosts{"a", "b", "a", "b"}), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(node_major_order(Hosts{"b", "a", "b", "c", "a"}), (std::vector<int>{0, 2, 1, 4, 3}));
  // By slot (mpirun's default) and one host: the identity.
  EXPECT_EQ(node_major_order(Hosts{"a", "a", "b", "b"}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(node_major_order(Hosts(3, "h")), (std::vector<int>{0, 1, 2}));
}

std::string refusal(const MeshShape& shape, const Hosts& hosts) {
  try {
    check_groups_inside_nodes(shape, hosts, false);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(NodePlacement, TpInsideNodesAndDpPpAcrossPass) {
  const Hosts two_by_two{"node0", "node0", "node1", "node1"};
  EXPECT_EQ(refusal(MeshShape{.dp = 2, .tp = 2}, two_by_two), "");
  EXPECT_EQ(refusal(MeshShape{.pp = 2, .tp = 2}, two_by_two), "");
  EXPECT_EQ(refusal(MeshShape{.dp = 4}, two_by_two), "");
  EXPECT_EQ(refusal(MeshShape{.cp = 2, .tp = 2}, Hosts(4, "h")), "");
}

TEST(NodePlacement, ATpGroupAcrossNodesIsRefusedNamingItsNodesAndTheWayOut) {
  const std::string e = refusal(MeshShape{.dp = 2, .tp = 2}, Hosts{"node0", "node1", "node1", "node1"});
  EXPECT_NE(e.find("tensor-parallel (tp) group of mesh ranks 0-1 spans nodes (node0: rank 0; node1: rank 1)"),
            std::string::npos) << e;
  EXPECT_NE(e.find("Ranks per node: node0 1, node1 3"), std::string::npos) << e;
  EXPECT_NE(e.find("multiple of parallel.tp = 2"), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-cross-node-tp"), std::string::npos) << e;
  EXPECT_NO_THROW(check_groups_inside_nodes(MeshShape{.dp = 2, .tp = 2}, Hosts{"node0", "node1", "node1", "node1"},
                                            true));
}

TEST(NodePlacement, ACpGroupAcrossNodesIsRefused) {
  // cp x tp = 4 ranks over two nodes of two: every tp group is inside a node.
  const std::string e = refusal(MeshShape{.cp = 2, .tp = 2}, Hosts{"n0", "n0", "n1", "n1"});
  EXPECT_NE(e.find("context-parallel (cp x tp) group of mesh ranks 0-3 spans nodes (n0: ranks 0,1; n1: ranks 2,3)"),
            std::string::npos) << e;
  EXPECT_NE(e.find("parallel.cp * parallel.tp = 4"), std::string::npos) << e;
}

TEST(NodePlacement, NodesAreDescribedWithTheirRankRanges) {
  EXPECT_EQ(describe_nodes(Hosts{"node0", "node0", "node1", "node1", "node2"}),
            "3 nodes: node0 ranks 0-1, node1 ranks 2-3, node2 rank 4");
  EXPECT_EQ(describe_nodes(Hosts(4, "h")), "");
}

// On one host (every threads-backend job) the context names it for every
// rank and the mesh order is the launch order.
TEST(NodePlacement, AThreadsWorldIsOneNodeInLaunchOrder) {
  char host[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  LaunchOptions o;
  o.world_size = 4;
  o.mesh = MeshShape{.dp = 2, .tp = 2};
  std::mutex mu;
  std::vector<int> ranks;
  launch_threads(o, [&](ParallelContext& ctx) {
    EXPECT_EQ(ctx.host_of_rank, Hosts(4, host));
    EXPECT_EQ(ctx.rank, ctx.world->rank());
    std::lock_guard<std::mutex> lock(mu);
    ranks.push_back(ctx.rank);
  });
  EXPECT_EQ(ranks.size(), 4u);
}

// The processes sharing a rank's machine (its cores): mpirun's count when
// it exports one, else (srun's direct launch exports none) the ranks on the
// rank's host.
TEST(NodePlacement, LocalRanksFromTheLauncherElseFromTheHostNames) {
  testing::ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr), mpich("MPI_LOCALNRANKS", nullptr);
  ParallelContext ctx;
  ctx.host_of_rank = {"node0", "node0", "node0", "node1"};
  ctx.rank = 1;
  EXPECT_EQ(local_ranks(ctx), 3);
  ctx.rank = 3;
  EXPECT_EQ(local_ranks(ctx), 1);
  testing::ScopedEnv local("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EXPECT_EQ(local_ranks(ctx), 2);
}

}  // namespace
}  // namespace meshtrain::comm
