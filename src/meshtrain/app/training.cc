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

// mpirun's arguments for a hostfile job, and how its failure is explained.
void place_on_hosts(const LaunchRequest& r, train::LaunchJob& job) {
  MT_REQUIRE(ConfigError, !r.hostfile.empty() || r.rsh_agent.empty(),
             "--rsh-agent starts ranks on the hosts of a hostfile; give --hostfile FILE too");
  if (r.hostfile.empty()) return;
  const std::string hostfile = std::filesystem::absolute(r.hostfile).string();
  const std::vector<train::HostfileEntry> hosts = train::read_hostfile(hostfile);
  int slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  MT_REQUIRE(ConfigError, r.np <= slots, "-n ", r.np, " ranks but the hostfile '", r.hostfile, "' has ", slots,
             " slots on ", hosts.size(), " host(s): lower -n or give the hosts more slots (`node0 slots=4`)");
  const std::string agent = agent_path(r.rsh_agent);
  job.mpirun.insert(job.mpirun.end(), {"--hostfile", hostfile});
  if (!agent.empty()) job.mpirun.insert(job.mpirun.end(), {"--mca", "plm_rsh_agent", agent});
  job.export_environment = true;
  job.diagnose = [hosts, agent, hostfile] {
    const auto lost = train::unreachable_hosts(hosts, agent, std::chrono::seconds(10));
    std::string out;
    for (const auto& l : lost) out += (out.empty() ? "" : ", ") + l;
    return out.empty() ? out : "lost node(s) of " + hostfile + ": " + out;
  };
  // A restart runs on the same hosts: it waits for a lost node to answer
  // again (rebooted or replaced), as long as a job's start may take.
  job.before_relaunch = [hosts, agent] {
    constexpr int kWaitSeconds = 300;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kWaitSeconds);
    for (bool said = false;;) {
      const auto lost = train::unreachable_hosts(hosts, agent, std::chrono::seconds(10));
      if (lost.empty()) return;
      if (!said)
        std::fprintf(stderr, "meshtrain launch: waiting up to %d s for %s to answer before the restart\n",
                     kWaitSeconds, lost.front().substr(0, lost.front().find(' ')).c_str());
      said = true;
      MT_REQUIRE(CommError, std::chrono::steady_clock::now() < until, "the hostfile's hosts did not answer within ",
                 kWaitSeconds, " s: ", lost.front());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  };
}

// An elastic job's next launch (supervisor.h, LaunchJob::relayout): the
// largest layout of the job's global window on the ranks available now:
// the capacity file's count, else -n; with a hostfile at most the slots of
// the hosts that answer, which a relaunch then runs on alone (a hostfile of
// them in the run directory).
std::function<std::string(train::LaunchJob&, bool)> elastic_relayout(const train::TrainConfig& cfg,
                                                                      const LaunchRequest& r) {
  auto last = std::make_shared<train::ElasticLayout>(train::current_layout(cfg));
  return [cfg, r, last](train::LaunchJob& next, bool after_failure) {
    int capacity = train::read_capacity(cfg, r.np);
    if (!r.hostfile.empty()) {
      std::vector<train::HostfileEntry> alive = train::read_hostfile(r.hostfile);
      const auto lost = train::unreachable_hosts(alive, agent_path(r.rsh_agent), std::chrono::seconds(10));
      std::erase_if(alive, [&](const train::HostfileEntry& h) {
        return std::any_of(lost.begin(), lost.end(), [&](const std::string& l) { return l.rfind(h.host + " ", 0) == 0; });
      });
      int slots = 0;
      std::string text;
      for (const auto& h : alive) slots += h.slots, text += h.host + " slots=" + std::to_string(h.slots) + "\n";
      capacity = std::min(capacity, slots);
      const std::string hosts = (std::filesystem::absolute(cfg.metrics.run_dir) / ".meshtrain-hosts").string();
      write_file_atomically(hosts, text);
      *std::find(next.mpirun.begin(), next.mpirun.end(), std::filesystem::absolute(r.hostfile).string()) = hosts;
    }
    const train::ElasticLayout to =
        train::shrink_or_grow(cfg, capacity, after_failure ? "after the failure" : "capacity changed");
    *std::next(std::find(next.mpirun.begin(), next.mpirun.end(), "-np")) = std::to_string(to.ranks);
    next.command.insert(next.command.end(), {"--set", "parallel.dp=" + std::to_string(to.dp), "--set",
                                             "training.grad_accum=" + std::to_string(to.grad_accum)});
    if (to.ranks == last->ranks && to.dp == last->dp) return std::string();
    const std::string change = last->describe() + " -> " + to.describe();
    *last = to;
    return change;
  };
}

}  // namespace

int launch(const LaunchRequest& r) {
  std::vector<std::string> overrides = train_overrides(r.train);
  overrides.push_back("comm.backend=mpi");
  if (r.allow_cross_node_tp) overrides.push_back("comm.allow_cross_node_tp=true");
  const train::TrainConfig cfg = train::load_config(r.train.config, overrides);  // fails before mpirun starts
  train::check_run_directory(cfg);
  // The job's rank 0 accepts the lock of the launcher that supervises it.
  const train::RunDirectoryLock lock(cfg.metrics.run_dir);
  ::setenv("MESHTRAIN_LOCK_HOLDER", std::to_string(::getpid()).c_str(), 1);
  train::LaunchJob job;
  job.max_restarts = cfg.comm.restart_on_failure ? cfg.comm.max_restarts : 0;
  job.mpirun = {r.mpirun, "-np", std::to_string(r.np)};
  place_on_hosts(r, job);
  job.mpirun.insert(job.mpirun.end(), r.mpirun_args.begin(), r.mpirun_args.end());
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  MT_REQUIRE(ConfigError, n > 0, "cannot find this executable (/proc/self/exe)");
  job.command = {std::string(self, size_t(n)), "train", r.train.config};
  job.stop_file = (std::filesystem::absolute(cfg.metrics.run_dir) / train::kRunStopFile).string();
  job.abort_file = (std::filesystem::absolute(cfg.metrics.run_dir) / train::kRunAbortFile).string();
  for (const auto& o : overrides) {
    job.command.push_back("--set");
    job.command.push_back(o);
  }
  // The ranks print as this command was asked to (mpirun gives them a pseudo-terminal).
  if (progress_mode() != ProgressMode::Auto)
    job.command.insert(job.command.begin() + 1, {"--progress", progress_mode_name(progress_mode())});
  for (const auto& [var, value] : mpirun_root_environment(::geteuid() == 0)) {
    if (std::getenv(var.c_str())) continue;  // the user's own setting stands
    std::fprintf(stderr, "meshtrain launch: running as root: setting %s=%s so that Open MPI's mpirun starts\n",
                 var.c_str(), value.c_str());
    ::setenv(var.c_str(), value.c_str(), 1);
  }
  if (cfg.comm.elastic) {
    job.max_restarts = cfg.comm.max_restarts;
    job.before_relaunch = nullptr;  // an elastic job continues on the hosts that answer
    job.relayout = elastic_relayout(cfg, r);
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
