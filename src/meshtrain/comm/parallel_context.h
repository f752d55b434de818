// ParallelContext: what a rank needs to run a parallel layout, passed
// explicitly (no globals: with the threads backend many ranks share a
// process). Built by launch_threads / launch_mpi / launch (launch.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/allocator.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::comm {

struct ParallelContext {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<ProcessGroup> world;
  Mesh mesh;                                    // groups along every axis
  std::vector<std::string> host_of_rank;        // the node of each world rank (launch.h)
  std::shared_ptr<CachingAllocator> allocator;  // this rank's memory
  CounterRng rng{0};                            // same seed on every rank
  // Set when the groups record instead of communicating (recording_group.h):
  // the step stamps its program actions and phases into it.
  std::shared_ptr<CommLedger> ledger;

  ProcessGroup& group(Axes axes) const { return mesh.group(axes); }
  // By name ("dp", "pp+tp"; or {"pp", "tp"}): for tools and tests.
  ProcessGroup& group(std::string_view key) const { return mesh.group(key); }
  ProcessGroup& group(std::initializer_list<std::string_view> names) const { return mesh.group(names); }
};

}  // namespace meshtrain::comm
