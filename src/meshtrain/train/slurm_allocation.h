// A Slurm job's allocation as its batch script or salloc shell sees it
// (docs/multi-node.md, "Slurm"): the job, its nodes in order and the tasks
// each may run, from the SLURM_* variables Slurm sets. `meshtrain launch`
// starts the ranks inside it with srun and probes its nodes as it probes a
// hostfile's hosts.
#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/train/hostfile.h"

namespace meshtrain::train {

struct SlurmAllocation {
  std::string job_id;                // SLURM_JOB_ID
  std::vector<HostfileEntry> nodes;  // SLURM_JOB_NODELIST, slots = SLURM_TASKS_PER_NODE
  // The tasks of the job step this process runs in (SLURM_STEP_NUM_TASKS);
  // 0 in the batch script or an salloc shell, which are no step.
  int step_tasks = 0;
  int tasks() const;
};

using EnvironmentLookup = std::function<const char*(const char*)>;

// The allocation this process runs in; nullopt when SLURM_JOB_ID is not
// set. ConfigError naming the variable when the node list or the tasks per
// node cannot be read or do not match.
std::optional<SlurmAllocation> slurm_allocation(
    const EnvironmentLookup& env = [](const char* name) { return std::getenv(name); });

// Slurm's compressed host list: "node[0-2,5],gpu[01-02]" -> node0 node1
// node2 node5 gpu01 gpu02 (zero padded to the width of a range's first
// number; several bracket groups in one name multiply out, left first).
std::vector<std::string> expand_hostlist(const std::string& list);

// SLURM_TASKS_PER_NODE's form: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_tasks_per_node(const std::string& list);

}  // namespace meshtrain::train
