#include "meshtrain/comm/launch.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/node_placement.h"
#include "meshtrain/comm/thread_world.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/core/threading.h"

namespace meshtrain::comm {
namespace {

MeshShape effective_mesh(MeshShape m, int world) {
  if (m.world_size() == 1 && world > 1) m.dp = world;  // default: pure data parallel
  return m;
}

bool is_abort(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CommAborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The world numbered node by node (node_placement.h): the mesh's inner
// axes, tp and cp, then fall inside a node.
std::shared_ptr<ProcessGroup> node_major_world(const std::shared_ptr<ProcessGroup>& world,
                                               std::vector<std::string>& host_of_rank) {
  const std::vector<std::string> hosts = gather_host_names(*world);
  const std::vector<int> order = node_major_order(hosts);
  host_of_rank.clear();
  for (int r : order) host_of_rank.push_back(hosts[size_t(r)]);
  const int position = int(std::find(order.begin(), order.end(), world->rank()) - order.begin());
  if (std::is_sorted(order.begin(), order.end())) return world;
  return world->split(0, position, SplitPlace{world->size(), position}, "world");
}

ParallelContext make_context(const LaunchOptions& o, const std::shared_ptr<ProcessGroup>& launched) {
  const MeshShape shape =
      o.mesh_from_world ? o.mesh_from_world(launched->size()) : effective_mesh(o.mesh, launched->size());
  shape.validate(launched->size());
  ParallelContext ctx;
  const auto world = node_major_world(launched, ctx.host_of_rank);
  check_groups_inside_nodes(shape, ctx.host_of_rank, o.allow_cross_node_groups);
  ctx.rank = world->rank();
  ctx.world_size = world->size();
  ctx.world = world;
  ctx.mesh = Mesh::create(shape, world);
  ctx.allocator = CachingAllocator::create();
  ctx.rng = CounterRng(o.seed);
  return ctx;
}

}  // namespace

Backend parse_backend(const std::string& name) {
  if (name == "threads") return Backend::Threads;
  if (name == "mpi") return Backend::Mpi;
  MT_THROW(ConfigError, "unknown backend '", name, "' (threads | mpi)");
}

int launcher_local_ranks() {
  // Open MPI's and MPICH's count of the processes on this machine.
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  return 0;
}

int local_ranks(const ParallelContext& ctx) {
  // srun's direct launch exports no count, so then the ranks' host names do.
  if (const int n = launcher_local_ranks()) return n;
  const auto& hosts = ctx.host_of_rank;
  return int(std::count(hosts.begin(), hosts.end(), hosts.at(size_t(ctx.rank))));
}

void launch_threads(int world_size, const RankFn& fn) {
  LaunchOptions o;
  o.world_size = world_size;
  launch_threads(o, fn);
}

void launch_threads(const LaunchOptions& o, const RankFn& fn) {
  const int n = o.world_size;
  effective_mesh(o.mesh, n).validate(n);
  auto world = ThreadWorld::create(n, o.group);
  std::mutex mu;
  std::exception_ptr first;  // the root cause, not the CommAborted it causes
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  auto rank_main = [&](int r) {
    set_compute_threads(threads_per_rank(n));
    fault::set_thread_rank(r);
    // The context outlives the catch block: its groups must not be torn
    // down (joining progress threads) before the world is aborted.
    std::optional<ParallelContext> ctx;
    std::string failure;
    std::exception_ptr error;
    try {
      ctx.emplace(make_context(o, world->group(r)));
      fn(*ctx);
    } catch (const std::exception& e) {
      failure = detail::concat("rank ", r, " failed: ", e.what());
      error = std::current_exception();
    } catch (...) {
      failure = detail::concat("rank ", r, " failed with a non-standard exception");
      error = std::current_exception();
    }
    if (error) {
      {
        // The root cause wins over the CommAborted errors it caused on
        // peers, whichever reached this point first.
        std::lock_guard<std::mutex> lock(mu);
        if (!first || (is_abort(first) && !is_abort(error))) first = error;
        if (o.failed_ranks && !is_abort(error)) o.failed_ranks->push_back(r);
      }
      world->abort(failure);
    }
    ctx.reset();
  };
  for (int r = 0; r < n; ++r) {
    try {
      threads.emplace_back(rank_main, r);
    } catch (const std::system_error& e) {
      // The ranks already started must stop and be joined, not terminate().
      world->abort(detail::concat("cannot start rank ", r, " of ", n, ": ", e.what()));
      for (auto& t : threads) t.join();
      MT_THROW(CommError, "cannot start rank thread ", r, " of ", n, " (", e.what(),
               "): the threads backend runs every rank as a thread of this process");
    }
  }
  for (auto& t : threads) t.join();
  if (o.failed_ranks) std::sort(o.failed_ranks->begin(), o.failed_ranks->end());
  if (first) std::rethrow_exception(first);
}

void launch_mpi(const LaunchOptions& o, const RankFn& fn) {
  auto world = mpi_world(o.group);
  const int rank = world->rank();
  fault::set_thread_rank(rank);
  try {
    {
      ParallelContext ctx = make_context(o, world);
      // Processes sharing this machine share its cores.
      set_compute_threads(threads_per_rank(local_ranks(ctx)));
      fn(ctx);
    }
    world.reset();
  } catch (const std::exception& e) {
    // Peers blocked inside MPI cannot be woken any other way.
    mpi_abort(detail::concat("rank ", rank, " failed: ", e.what()));
  } catch (...) {
    mpi_abort(detail::concat("rank ", rank, " failed with a non-standard exception"));
  }
  mpi_finalize();
}

void launch(const LaunchOptions& o, const RankFn& fn) {
  if (o.backend == Backend::Mpi) return launch_mpi(o, fn);
  // N processes each running their own threads world would silently train
  // N independent models.
  const char* np = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!np) np = std::getenv("PMI_SIZE");
  if (!np) np = std::getenv("SLURM_STEP_NUM_TASKS");  // srun (its direct launch exports neither)
  MT_REQUIRE(ConfigError, !np || std::atoi(np) <= 1, "started by mpirun (or srun) with ", np,
             " processes but backend = threads; use backend = mpi (or run without mpirun)");
  launch_threads(o, fn);
}

}  // namespace meshtrain::comm
