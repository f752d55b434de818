#include "meshtrain/app/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "meshtrain/app/training.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/plan/machine_bench.h"
#include "meshtrain/train/memory_estimate.h"
#include "meshtrain/train/hostfile.h"
#include "meshtrain/train/peak_flops.h"
#include "meshtrain/train/supervisor.h"

namespace meshtrain::app {

std::string size_error(const std::string& text) {
  try {
    comm::bench::parse_size(text);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

void bench_comm(const BenchCommRequest& q) {
  namespace cb = comm::bench;
  cb::BenchOptions o;
  o.backend = comm::parse_backend(q.backend);
  o.ranks = q.ranks;
  o.min_bytes = cb::parse_size(q.min_bytes);
  o.max_bytes = cb::parse_size(q.max_bytes);
  o.iters = q.iters;
  o.hierarchical = q.hierarchical;
  o.ops.clear();
  for (const auto& op : q.ops) o.ops.push_back(cb::parse_op(op));
  MT_REQUIRE(ConfigError, o.min_bytes >= 4 && o.min_bytes <= o.max_bytes, "bench comm: --min-bytes ", q.min_bytes,
             " must be at least 4 bytes and at most --max-bytes ", q.max_bytes);
  // Each rank holds a send and a receive buffer of the largest message, and
  // the backend up to one more in flight (the hierarchical form one more:
  // its reordered vector); the threads backend's ranks share this process,
  // mpirun's this machine.
  train::MemoryEstimate per_rank;
  per_rank.workspace = int64_t(std::min<size_t>(o.max_bytes, size_t(1) << 60)) * (o.hierarchical ? 4 : 3);
  int here = o.ranks;
  if (o.backend == comm::Backend::Mpi) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    here = local ? std::max(1, std::atoi(local)) : 1;
  }
  train::check_available_memory(per_rank, here, stderr, "Lower --max-bytes, or run fewer ranks on this machine");
  cb::run(o, stdout);
}

namespace {

// `bench machine --hostfile`: the same command under mpirun on every slot of
// the hostfile's hosts, through the launch path of `meshtrain launch`.
void bench_machine_on_hosts(const BenchMachineRequest& q) {
  MT_REQUIRE(ConfigError, q.ranks == 0, "bench machine: --ranks ", q.ranks,
             " sets the ranks on this machine; with --hostfile every slot of the hostfile runs one");
  LaunchRequest on_hosts;
  on_hosts.hostfile = q.hostfile;
  on_hosts.rsh_agent = q.rsh_agent;
  if (!q.hostfile.empty())
    for (const train::HostfileEntry& h : train::read_hostfile(std::filesystem::absolute(q.hostfile).string()))
      on_hosts.np += h.slots;
  train::LaunchJob job;
  mpirun_job(on_hosts, job);
  job.command = {this_executable(), "bench", "machine", "--max-bytes", q.max_bytes};
  if (!q.out.empty()) job.command.insert(job.command.end(), {"--out", std::filesystem::absolute(q.out).string()});
  const std::filesystem::path stop = std::filesystem::temp_directory_path() /
                                     ("meshtrain-bench-machine-" + std::to_string(::getpid()) + ".stop");
  job.stop_file = stop.string();
  const int code = train::relaunch_mpi(job);
  MT_REQUIRE(CommError, code == 0, "bench machine --hostfile ", q.hostfile, ": mpirun exited with code ", code,
             " (its ranks' messages are above)");
}

}  // namespace

std::string bench_machine(const BenchMachineRequest& q) {
  if (!q.hostfile.empty() || !q.rsh_agent.empty()) {
    bench_machine_on_hosts(q);
    return "";
  }
  plan::MachineBenchOptions o;
  o.ranks = q.ranks;
  o.max_bytes = comm::bench::parse_size(q.max_bytes);
  const std::string toml = plan::bench_machine(o);
  if (toml.empty()) return "";  // another rank of the job writes it
  if (q.out.empty()) return toml;
  const std::filesystem::path out = std::filesystem::absolute(q.out);
  checkpoint::atomic_write_file(out.parent_path(), out.filename().string(), toml);
  return "wrote " + q.out + "\n";
}

std::string bench_peak(const BenchPeakRequest& q) {
  const int cores = q.cores > 0 ? q.cores : hardware_cores();
  std::string out;
  for (const std::string& name : q.dtypes) {
    const train::PeakFlops p = train::peak_flops(parse_dtype(name), cores, cores, /*refresh=*/true);
    char line[512];
    std::snprintf(line, sizeof line, "%-4s %8.1f GFLOP/s per core (best GEMM, %d core%s busy), %.1f GFLOP/s on %d: %s\n",
                  name.c_str(), p.per_core * 1e-9, cores, cores > 1 ? "s" : "", p.total() * 1e-9, cores,
                  p.origin.c_str());
    out += line;
  }
  return out + "key: " + train::peak_key(parse_dtype(q.dtypes.front()), cores) + "\n";
}

}  // namespace meshtrain::app
