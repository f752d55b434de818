// ParallelContext: what a rank needs to run a parallel layout, passed
// explicitly (no globals: with the threads backend many ranks share a
// process). Built by launch_threads / launch_mpi / launch (launch.h).
#pragma once

#include <memory>

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
  std::shared_ptr<CachingAllocator> allocator;  // this rank's memory
  CounterRng rng{0};                            // same seed on every rank

  ProcessGroup& group(const std::string& axis) const { return mesh.group(axis); }
  ProcessGroup& group(std::vector<std::string> axes) const { return mesh.group(std::move(axes)); }
  ProcessGroup& group(std::initializer_list<const char*> axes) const { return mesh.group(axes); }
};

}  // namespace meshtrain::comm
