#include "meshtrain/app/training.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/core/output_file.h"
#include "meshtrain/core/status_line.h"

#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/elastic.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/hostfile.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/run_dir.h"
#include "meshtrain/train/slurm_allocation.h"
#include "meshtrain/train/supervisor.h"

namespace meshtrain::app {

std::vector<std::string> train_overrides(const TrainRequest& r) {
  std::vector<std::string> o = r.overrides;
  if (r.max_restarts >= 0) {
    o.push_back("comm.restart_on_failure=true");
    o.push_back("comm.max_restarts=" + std::to_string(r.max_restarts));
  }
  if (r.elastic) o.push_back("comm.elastic=true");
  if (r.min_ranks > 0) o.push_back("comm.min_ranks=" + std::to_string(r.min_ranks));
  return o;
}

int train(const TrainRequest& r) { return train::train_main(train::load_config(r.config, train_overrides(r))); }

std::vector<std::pair<std::string, std::string>> mpirun_root_environment(bool as_root) {
  if (!as_root) return {};
  // Open MPI refuses to start as root without both (its --allow-run-as-root
  // flag is the same, but another MPI's mpirun would reject the flag).
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
}

namespace {

// An agent given as a path relative to here, absolute: mpirun and the
// probes run it from other directories too.
std::string agent_path(const std::string& agent) {
  if (agent.find('/') == std::string::npos || agent.find(' ') != std::string::npos) return agent;
  return std::filesystem::absolute(agent).string();
}

// Whether execvp would find the launcher `name` (it is run as given:
// Open MPI reads more into an mpirun called by its absolute path).
bool can_run(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > begin ? dirs.substr(begin, end - begin) : ".";
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    begin = end + 1;
  }
  return false;
}

int total_slots(const std::vector<train::HostfileEntry>& hosts) {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

// The nodes a job runs on and how each is probed (`AGENT HOST true`): a
// hostfile's hosts through the rsh agent, or a Slurm allocation's nodes
// through srun (docs/multi-node.md).
struct JobNodes {
  std::vector<train::HostfileEntry> hosts;
  std::string agent;
  std::string name;  // the hostfile's path, "Slurm job 12"
};

// How a failed job's nodes are probed for the lost one, and waited for
// before a restart.
void supervise_nodes(const JobNodes& nodes, train::LaunchJob& job) {
  job.diagnose = [nodes] {
    const auto lost = train::unreachable_hosts(nodes.hosts, nodes.agent, std::chrono::seconds(10));
    std::string out;
    for (const auto& l : lost) out += (out.empty() ? "" : ", ") + l;
    return out.empty() ? out : "lost node(s) of " + nodes.name + ": " + out;
  };
  // A restart runs on the same nodes: it waits for a lost node to answer
  // again (rebooted or replaced), as long as a job's start may take.
  job.before_relaunch = [nodes] {
    constexpr int kWaitSeconds = 300;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kWaitSeconds);
    for (bool said = false;;) {
      const auto lost = train::unreachable_hosts(nodes.hosts, nodes.agent, std::chrono::seconds(10));
      if (lost.empty()) return;
      if (!said)
        std::fprintf(stderr, "meshtrain launch: waiting up to %d s for %s to answer before the restart\n",
                     kWaitSeconds, lost.front().substr(0, lost.front().find(' ')).c_str());
      said = true;
      MT_REQUIRE(CommError, std::chrono::steady_clock::now() < until, "the nodes of ", nodes.name,
                 " did not answer within ", kWaitSeconds, " s: ", lost.front());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  };
}

}  // namespace

void mpirun_job(const LaunchRequest& r, train::LaunchJob& job) {
  MT_REQUIRE(ConfigError, !r.hostfile.empty() || r.rsh_agent.empty(),
             "--rsh-agent starts ranks on the hosts of a hostfile; give --hostfile FILE too");
  MT_REQUIRE(ConfigError, r.srun_args.empty(), "--srun-arg is for srun, and this job runs under mpirun (",
             r.launcher == "mpirun" ? "--launcher mpirun" : "SLURM_JOB_ID is not set", "): use --mpirun-arg");
  MT_REQUIRE(ConfigError, can_run(r.mpirun), "cannot find '", r.mpirun,
             "' to start the ranks: install Open MPI (Debian: openmpi-bin) or give its path with --mpirun PATH");
  job.mpirun = {r.mpirun, "-np", std::to_string(r.np)};
  if (!r.hostfile.empty()) {
    const std::string hostfile = std::filesystem::absolute(r.hostfile).string();
    const JobNodes nodes{train::read_hostfile(hostfile), agent_path(r.rsh_agent), hostfile};
    const int slots = total_slots(nodes.hosts);
    MT_REQUIRE(ConfigError, r.np <= slots, "-n ", r.np, " ranks but the hostfile '", r.hostfile, "' has ", slots,
               " slots on ", nodes.hosts.size(), " host(s): lower -n or give the hosts more slots (`node0 slots=4`)");
    supervise_nodes(nodes, job);
    job.mpirun.insert(job.mpirun.end(), {"--hostfile", hostfile});
    if (!nodes.agent.empty()) job.mpirun.insert(job.mpirun.end(), {"--mca", "plm_rsh_agent", nodes.agent});
    job.export_environment = true;
  }
  job.mpirun.insert(job.mpirun.end(), r.mpirun_args.begin(), r.mpirun_args.end());
  for (const auto& [var, value] : mpirun_root_environment(::geteuid() == 0)) {
    if (std::getenv(var.c_str())) continue;  // the user's own setting stands
    std::fprintf(stderr, "meshtrain launch: running as root: setting %s=%s so that Open MPI's mpirun starts\n",
                 var.c_str(), value.c_str());
    ::setenv(var.c_str(), value.c_str(), 1);
  }
}

std::string this_executable() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  MT_REQUIRE(ConfigError, n > 0, "cannot find this executable (/proc/self/exe)");
  return std::string(self, size_t(n));
}

namespace {

// srun's arguments inside a Slurm allocation: the ranks fill its nodes in
// order, each up to its tasks, as mpirun fills a hostfile's slots; PMIx
// wires them up (Open MPI's direct launch); every variable of this
// environment, MESHTRAIN_* included, reaches them.
// `srun ... -w NODE true` probes a node: one task there, beside the job's steps.
std::string srun_probe(const LaunchRequest& r, const train::SlurmAllocation& allocation) {
  return r.srun + " --jobid=" + allocation.job_id + " --overlap --nodes=1 --ntasks=1 --quiet -w";
}

// The first of `nodes` whose tasks hold `ranks` ranks.
std::vector<train::HostfileEntry> first_nodes(const std::vector<train::HostfileEntry>& nodes, int ranks,
                                              const train::SlurmAllocation& allocation) {
  std::vector<train::HostfileEntry> used;
  for (int placed = 0; placed < ranks; placed += used.back().slots) {
    MT_REQUIRE(CommError, used.size() < nodes.size(), ranks, " ranks do not fit the ", nodes.size(),
               " node(s) of Slurm job ", allocation.job_id, " that answer");
    used.push_back(nodes[used.size()]);
  }
  return used;
}

// srun starting `ranks` ranks on the first of `nodes` whose tasks hold them.
// overlap: share the CPUs with earlier steps (a failed step on a node that
// stopped answering holds its CPUs until Slurm declares the node down).
std::vector<std::string> srun_command(const LaunchRequest& r, const train::SlurmAllocation& allocation,
                                      const std::vector<train::HostfileEntry>& nodes, int ranks, bool overlap = false) {
  const std::vector<train::HostfileEntry> used = first_nodes(nodes, ranks, allocation);
  std::string names;
  for (const auto& n : used) names += (names.empty() ? "" : ",") + n.host;
  std::vector<std::string> cmd = {r.srun,
                                  "--mpi=pmix",
                                  "--ntasks=" + std::to_string(ranks),
                                  "--nodes=" + std::to_string(used.size()),
                                  "--nodelist=" + names,
                                  "--distribution=block",
                                  "--kill-on-bad-exit=1",
                                  "--export=ALL"};
  if (overlap) cmd.push_back("--overlap");
  cmd.insert(cmd.end(), r.srun_args.begin(), r.srun_args.end());
  std::fprintf(stderr, "meshtrain launch: Slurm job %s: %d rank(s) on %s with srun --mpi=pmix\n",
               allocation.job_id.c_str(), ranks, names.c_str());
  return cmd;
}

void srun_job(const LaunchRequest& r, const train::SlurmAllocation& allocation, train::LaunchJob& job) {
  MT_REQUIRE(ConfigError, r.hostfile.empty() && r.rsh_agent.empty() && r.mpirun_args.empty() &&
                              r.mpirun == LaunchRequest{}.mpirun,
             "--hostfile, --rsh-agent, --mpirun and --mpirun-arg are for mpirun, and this job runs under srun in Slurm job ",
             allocation.job_id, ": the allocation decides the nodes (give srun's own options with --srun-arg), or "
             "run mpirun with --launcher mpirun");
  MT_REQUIRE(ConfigError, allocation.step_tasks <= 1, "meshtrain launch runs as one of ", allocation.step_tasks,
             " tasks of a job step of Slurm job ", allocation.job_id, " (was it started with srun?): run it once, "
             "in the batch script or the salloc shell; it starts the ranks with srun itself");
  MT_REQUIRE(ConfigError, can_run(r.srun), "cannot find '", r.srun, "' to start the ranks in Slurm job ",
             allocation.job_id, " (SLURM_JOB_ID is set): install Slurm's client (Debian: slurm-client) on this node, "
             "give its path with --srun PATH, or start them with mpirun (--launcher mpirun)");
  const int tasks = allocation.tasks();
  MT_REQUIRE(ConfigError, r.np <= tasks, "-n ", r.np, " ranks but the allocation of Slurm job ", allocation.job_id,
             " has ", tasks, " tasks on ", allocation.nodes.size(), " node(s): lower -n, or ask sbatch or salloc "
             "for more (--nodes, --ntasks-per-node)");
  supervise_nodes({first_nodes(allocation.nodes, r.np, allocation), srun_probe(r, allocation),
                   "Slurm job " + allocation.job_id},
                  job);
  job.mpirun = srun_command(r, allocation, allocation.nodes, r.np);
}

// The nodes of `hosts` that answer `probe` (lost ones named on stderr by the caller's diagnosis).
std::vector<train::HostfileEntry> answering(std::vector<train::HostfileEntry> hosts, const std::string& probe) {
  const auto lost = train::unreachable_hosts(hosts, probe, std::chrono::seconds(10));
  std::erase_if(hosts, [&](const train::HostfileEntry& h) {
    return std::any_of(lost.begin(), lost.end(), [&](const std::string& l) { return l.rfind(h.host + " ", 0) == 0; });
  });
  return hosts;
}

int slots_of(const std::vector<train::HostfileEntry>& hosts) {
  int slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  return slots;
}

// An elastic job's next launch (supervisor.h, LaunchJob::relayout): the
// largest layout of the job's global window on the ranks available now:
// the capacity file's count, else -n; with a hostfile at most the slots of
// the hosts that answer, which a relaunch then runs on alone (a hostfile of
// them in the run directory); under srun at most the tasks of the
// allocation's nodes that answer, which the next srun runs on alone.
std::function<std::string(train::LaunchJob&, bool)> elastic_relayout(
    const train::TrainConfig& cfg, const LaunchRequest& r, const std::optional<train::SlurmAllocation>& slurm) {
  auto last = std::make_shared<train::ElasticLayout>(train::current_layout(cfg));
  return [cfg, r, slurm, last](train::LaunchJob& next, bool after_failure) {
    int capacity = train::read_capacity(cfg, r.np);
    std::vector<train::HostfileEntry> alive;
    if (slurm) {
      alive = answering(slurm->nodes, srun_probe(r, *slurm));
      capacity = std::min(capacity, slots_of(alive));
    } else if (!r.hostfile.empty()) {
      alive = answering(train::read_hostfile(r.hostfile), agent_path(r.rsh_agent));
      capacity = std::min(capacity, slots_of(alive));
      std::string text;
      for (const auto& h : alive) text += h.host + " slots=" + std::to_string(h.slots) + "\n";
      const std::string hosts = (std::filesystem::absolute(cfg.metrics.run_dir) / ".meshtrain-hosts").string();
      write_file_atomically(hosts, text);
      *std::find(next.mpirun.begin(), next.mpirun.end(), std::filesystem::absolute(r.hostfile).string()) = hosts;
    }
    const train::ElasticLayout to =
        train::shrink_or_grow(cfg, capacity, after_failure ? "after the failure" : "capacity changed");
    if (slurm)
      next.mpirun = srun_command(r, *slurm, alive, to.ranks, after_failure);
    else
      *std::next(std::find(next.mpirun.begin(), next.mpirun.end(), "-np")) = std::to_string(to.ranks);
    for (const std::string& assignment : to.overrides()) next.command.insert(next.command.end(), {"--set", assignment});
    const std::string change = train::describe_change(*last, to);
    *last = to;
    return change;
  };
}

}  // namespace

int launch(const LaunchRequest& r) {
  std::vector<std::string> overrides = train_overrides(r.train);
  overrides.push_back("comm.backend=mpi");
  if (r.allow_cross_node_tp) overrides.push_back("comm.allow_cross_node_tp=true");
  const train::TrainConfig cfg = train::load_config(r.train.config, overrides);  // fails before the ranks start
  train::check_run_directory(cfg);
  // Inside a Slurm allocation srun starts the ranks, unless a hostfile or
  // --launcher mpirun says otherwise.
  const auto allocation = train::slurm_allocation();
  MT_REQUIRE(ConfigError, r.launcher != "srun" || allocation, "--launcher srun starts the ranks inside a Slurm "
             "allocation, and SLURM_JOB_ID is not set: submit the job with sbatch (configs/slurm/train.sbatch) or run "
             "it in an salloc shell");
  const bool under_slurm = r.launcher == "srun" || (r.launcher == "auto" && allocation && r.hostfile.empty());
  train::LaunchJob job;
  job.max_restarts = cfg.comm.restart_on_failure ? cfg.comm.max_restarts : 0;
  if (under_slurm) srun_job(r, *allocation, job);
  else mpirun_job(r, job);
  // The job's rank 0 accepts the lock of the launcher that supervises it.
  const train::RunDirectoryLock lock(cfg.metrics.run_dir);
  ::setenv("MESHTRAIN_LOCK_HOLDER", std::to_string(::getpid()).c_str(), 1);
  job.command = {this_executable(), "train", r.train.config};
  job.stop_file = (std::filesystem::absolute(cfg.metrics.run_dir) / train::kRunStopFile).string();
  job.abort_file = (std::filesystem::absolute(cfg.metrics.run_dir) / train::kRunAbortFile).string();
  for (const auto& o : overrides) {
    job.command.push_back("--set");
    job.command.push_back(o);
  }
  // The ranks print as this command was asked to (mpirun gives them a pseudo-terminal).
  if (progress_mode() != ProgressMode::Auto)
    job.command.insert(job.command.begin() + 1, {"--progress", progress_mode_name(progress_mode())});
  if (cfg.comm.elastic) {
    job.max_restarts = cfg.comm.max_restarts;
    job.before_relaunch = nullptr;  // an elastic job continues on the hosts that answer
    job.relayout = elastic_relayout(cfg, r, under_slurm ? allocation : std::nullopt);
  }
  return train::relaunch_mpi(job);
}

VerifyResult verify(const VerifyRequest& r) {
  const train::TrainConfig cfg = train::load_config(r.config, r.overrides);
  const auto layout = train::parse_layout(r.layout);
  train::equivalence_configs(cfg, layout, r.bitwise);  // every refusal of the layout before any data is prepared
  train::ensure_prepared(cfg.data);
  const auto data = data::TokenDataset::open(cfg.data.path, "train");
  const double tolerance = r.tolerance.value_or(train::default_tolerance(cfg.training.precision));
  const auto report = train::compare_with_single_rank(cfg, layout, r.steps, data, tolerance, r.bitwise);
  return {report.pass(), report.str()};
}

}  // namespace meshtrain::app
