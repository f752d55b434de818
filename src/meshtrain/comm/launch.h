// Launchers that give every rank a ParallelContext, whichever backend:
//   launch_threads(4, [](ParallelContext& ctx) { ... });   // one process
//   launch_mpi(opts, fn);           // under: mpirun -np 4 meshtrain ...
//   launch(opts, fn);               // opts.backend = Threads | Mpi
// The world is numbered node by node before the mesh is built
// (node_placement.h). An exception on any rank aborts the world (peers wake with CommAborted
// instead of hanging); the first failure is rethrown (threads) or printed
// before MPI_Abort (mpi).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "meshtrain/comm/parallel_context.h"

namespace meshtrain::comm {

enum class Backend { Threads, Mpi };
Backend parse_backend(const std::string& name);  // "threads" | "mpi"

struct LaunchOptions {
  Backend backend = Backend::Threads;
  int world_size = 1;        // threads only; MPI takes it from mpirun
  MeshShape mesh{};          // all ones: everything goes to dp
  // Under MPI the world size is known only once started: when set, the
  // mesh is computed from it (and may throw ConfigError on a mismatch).
  std::function<MeshShape(int world_size)> mesh_from_world;
  GroupOptions group{};      // timeout, check mode
  // Run tp and cp groups that span nodes instead of refusing the mesh
  // (node_placement.h; comm.allow_cross_node_tp).
  bool allow_cross_node_groups = false;
  uint64_t seed = 0;
  // Threads backend: when set, filled with the ranks whose own failure (not
  // the abort it caused on their peers) ended the launch, in rank order: the
  // ranks an elastic job has lost.
  std::vector<int>* failed_ranks = nullptr;
};

using RankFn = std::function<void(ParallelContext&)>;

void launch_threads(int world_size, const RankFn& fn);
void launch_threads(const LaunchOptions& options, const RankFn& fn);
void launch_mpi(const LaunchOptions& options, const RankFn& fn);
void launch(const LaunchOptions& options, const RankFn& fn);

// The processes of an MPI job on this rank's machine, this one included:
// mpirun's count, else (srun) the ranks on this rank's host (host_of_rank).
int local_ranks(const ParallelContext& ctx);
// mpirun's count of them, known before MPI_Init; 0 where the launcher sets
// none (srun's direct launch).
int launcher_local_ranks();

}  // namespace meshtrain::comm
