// A Slurm allocation read from the SLURM_* variables (docs/multi-node.md,
// "Slurm"): Slurm's compressed host lists, the tasks per node, and the
// refusals that name the variable.
#include "meshtrain/train/slurm_allocation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "meshtrain/core/error.h"

namespace meshtrain::train {
namespace {

using Strings = std::vector<std::string>;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

EnvironmentLookup environment(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(SlurmAllocation, HostListsExpandAsSlurmWritesThem) {
  EXPECT_EQ(expand_hostlist("node[0-2,5],gpu[01-02]"), (Strings{"node0", "node1", "node2", "node5", "gpu01", "gpu02"}));
  EXPECT_EQ(expand_hostlist("login"), Strings{"login"});
  EXPECT_EQ(expand_hostlist("n[8-10]"), (Strings{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_hostlist("n[08-10]"), (Strings{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_hostlist("rack[1-2]-n[3-4].ib"), (Strings{"rack1-n3.ib", "rack1-n4.ib", "rack2-n3.ib", "rack2-n4.ib"}));
  EXPECT_EQ(expand_hostlist("a,b[7]"), (Strings{"a", "b7"}));
}

TEST(SlurmAllocation, MalformedHostListsAreRefusedNamingThem) {
  for (const char* bad : {"node[0-", "node]", "node[a-b]", "node[3-1]", "node[]", "a,,b", "", "[1-2]"})
    EXPECT_THAT([&] { expand_hostlist(bad); }, ThrowsMessage<ConfigError>(HasSubstr("the Slurm host list"))) << bad;
}

TEST(SlurmAllocation, TasksPerNodeExpand) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int>{4}));
  for (const char* bad : {"2(x)", "x", "2(x0)", "2(x3", "-1", "2,,1"})
    EXPECT_THAT([&] { expand_tasks_per_node(bad); }, ThrowsMessage<ConfigError>(HasSubstr("SLURM_TASKS_PER_NODE"))) << bad;
}

TEST(SlurmAllocation, TheJobsNodesAndTasksFromTheEnvironment) {
  EXPECT_FALSE(slurm_allocation(environment({})).has_value());  // not inside an allocation
  const auto a = slurm_allocation(environment(
      {{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "node[0-1],gpu7"}, {"SLURM_TASKS_PER_NODE", "2(x2),1"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->job_id, "42");
  ASSERT_EQ(a->nodes.size(), 3u);
  EXPECT_EQ(a->nodes[1].host, "node1");
  EXPECT_EQ(a->nodes[1].slots, 2);
  EXPECT_EQ(a->nodes[2].host, "gpu7");
  EXPECT_EQ(a->nodes[2].slots, 1);
  EXPECT_EQ(a->tasks(), 5);
  EXPECT_EQ(a->step_tasks, 0);  // the batch script is no job step
  const auto step = slurm_allocation(environment({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "n1"},
                                                  {"SLURM_TASKS_PER_NODE", "4"}, {"SLURM_STEP_ID", "0"},
                                                  {"SLURM_STEP_NUM_TASKS", "4"}}));
  EXPECT_EQ(step->step_tasks, 4);
}

TEST(SlurmAllocation, InconsistentVariablesAreRefusedNamingThem) {
  EXPECT_THAT(
      [] {
        slurm_allocation(environment(
            {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "node[0-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
      },
      ThrowsMessage<ConfigError>(
          HasSubstr("names 3 node(s) (SLURM_JOB_NODELIST=node[0-2]) but tasks for 2 (SLURM_TASKS_PER_NODE=2(x2))")));
  EXPECT_THAT([] { slurm_allocation(environment({{"SLURM_JOB_ID", "7"}})); },
              ThrowsMessage<ConfigError>(HasSubstr("SLURM_JOB_NODELIST or SLURM_TASKS_PER_NODE is not set")));
}

}  // namespace
}  // namespace meshtrain::train
