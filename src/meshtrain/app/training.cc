#include "meshtrain/app/training.h"

#include <unistd.h>

#include <climits>

#include "meshtrain/core/error.h"

#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/supervisor.h"

namespace meshtrain::app {

std::vector<std::string> train_overrides(const TrainRequest& r) {
  std::vector<std::string> o = r.overrides;
  if (r.max_restarts >= 0) {
    o.push_back("comm.restart_on_failure=true");
    o.push_back("comm.max_restarts=" + std::to_string(r.max_restarts));
  }
  return o;
}

int train(const TrainRequest& r) { return train::train_main(train::load_config(r.config, train_overrides(r))); }

int launch(const LaunchRequest& r) {
  std::vector<std::string> overrides = train_overrides(r.train);
  overrides.push_back("comm.backend=mpi");
  const train::TrainConfig cfg = train::load_config(r.train.config, overrides);  // fails before mpirun starts
  train::LaunchJob job;
  job.max_restarts = cfg.comm.restart_on_failure ? cfg.comm.max_restarts : 0;
  job.mpirun = {r.mpirun, "-np", std::to_string(r.np)};
  job.mpirun.insert(job.mpirun.end(), r.mpirun_args.begin(), r.mpirun_args.end());
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  MT_REQUIRE(ConfigError, n > 0, "cannot find this executable (/proc/self/exe)");
  job.command = {std::string(self, size_t(n)), "train", r.train.config};
  for (const auto& o : overrides) {
    job.command.push_back("--set");
    job.command.push_back(o);
  }
  return train::relaunch_mpi(job);
}

VerifyResult verify(const VerifyRequest& r) {
  const train::TrainConfig cfg = train::load_config(r.config, r.overrides);
  const auto layout = train::parse_layout(r.layout);  // every argument is checked before any data is prepared
  train::ensure_prepared(cfg.data);
  const auto data = data::TokenDataset::open(cfg.data.path, "train");
  const double tolerance = r.tolerance.value_or(train::default_tolerance(cfg.training.precision));
  const auto report = train::compare_with_single_rank(cfg, layout, r.steps, data, tolerance, r.bitwise);
  return {report.pass(), report.str()};
}

}  // namespace meshtrain::app
