// `meshtrain train` and `meshtrain verify`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::train {
struct LaunchJob;
}

namespace meshtrain::app {

struct TrainRequest {
  std::string config;                  // TOML file
  std::vector<std::string> overrides;  // section.key=value
  int max_restarts = -1;               // >= 0: comm.restart_on_failure with this many restarts
  bool elastic = false;                // comm.elastic (train/elastic.h)
  int min_ranks = 0;                   // > 0: comm.min_ranks
};
// The overrides of a request, --max-restarts included.
std::vector<std::string> train_overrides(const TrainRequest& request);
// Runs the configured job; its log goes to stdout (rank 0). Returns the exit
// code: 0, or 128 + signal when SIGINT/SIGTERM stopped it after a save.
int train(const TrainRequest& request);

// `meshtrain launch`: the job under mpirun, or under srun inside a Slurm
// allocation (MPI backend), run again from its latest checkpoint when it
// fails, at most max_restarts times (default: the config's
// comm.max_restarts when comm.restart_on_failure). The config is
// validated before the launcher starts. Returns the launcher's last exit
// code.
// With a hostfile the ranks go to its hosts (docs/multi-node.md): mpirun
// starts them through the rsh agent (ssh by default; the emulated
// cluster's scripts/cluster-rsh.sh), TCP between nodes and shared memory
// inside one. Inside a Slurm allocation (SLURM_JOB_ID set; launcher
// "auto" or "srun") `srun --mpi=pmix` starts them on the allocation's
// nodes, filled in order as mpirun fills a hostfile's slots. Either way tp
// and cp groups that would span nodes are refused unless
// allow_cross_node_tp, and when the job fails the nodes are probed (the rsh
// agent, or srun on each node) and a lost one is named.
struct LaunchRequest {
  int np = 0;
  std::string launcher = "auto";  // auto | mpirun | srun
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;
  std::string hostfile;    // "": every rank on this host
  std::string rsh_agent;   // "": mpirun's own (ssh); with a hostfile only
  std::string srun = "srun";
  std::vector<std::string> srun_args;
  bool allow_cross_node_tp = false;
  TrainRequest train;
};
int launch(const LaunchRequest& request);
// What Open MPI's mpirun needs in its environment to start as root
// (OMPI_ALLOW_RUN_AS_ROOT and _CONFIRM); nothing for another user. launch()
// sets those the user has not set and says so.
std::vector<std::pair<std::string, std::string>> mpirun_root_environment(bool as_root);
// mpirun's arguments for `request.np` ranks on this host or on the hosts of
// request.hostfile (the launch path of `meshtrain launch`): -np, the
// hostfile and rsh agent, every MESHTRAIN_* variable passed on, the probes
// that name a lost host and the wait for it before a restart, what mpirun
// needs as root. ConfigError naming the option for what cannot run.
void mpirun_job(const LaunchRequest& request, train::LaunchJob& job);
// The path of the running meshtrain binary (what mpirun starts on every host).
std::string this_executable();

struct VerifyRequest {
  std::string config, layout;  // layout: "dp=4,zero=3"
  std::vector<std::string> overrides;
  int steps = 3;
  // Per tensor; unset: the default of the config's training.precision
  // (train::default_tolerance: fp64 1e-10, fp32 5e-4, bf16/fp16 5e-2).
  std::optional<double> tolerance;
  bool bitwise = false;  // identical bits instead of a tolerance
};
struct VerifyResult {
  bool pass = false;
  std::string report;
};
// Runs `steps` updates in the layout and on one rank and compares them.
VerifyResult verify(const VerifyRequest& request);

}  // namespace meshtrain::app
