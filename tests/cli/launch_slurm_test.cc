// `meshtrain launch` inside a Slurm allocation (docs/multi-node.md,
// "Slurm"), run against a stand-in srun: the ranks' srun line, the
// allocation's nodes filled in order, a failed step's lost node named by
// probing the nodes with srun, the wait for it and the restart, the
// environment the job sees, and the refusals. A real Slurm runs the same
// path in the cluster tests (tests/cluster/cluster_test.sh, slurm*).
#include <sys/stat.h>

#include <memory>

#include "cli_test_util.h"
#include "support/scoped_env.h"

namespace meshtrain::cli {
namespace {

using namespace testing;
using meshtrain::testing::ScopedEnv;

// The launcher's variables, and the allocation's, set for one test and
// restored after it (the launcher exports its own into this process).
class SlurmEnvironment {
 public:
  SlurmEnvironment(const char* nodelist, const char* tasks_per_node) {
    for (const char* name : {"MESHTRAIN_LOCK_HOLDER", "MESHTRAIN_MAX_RESTARTS", "MESHTRAIN_STOP_FILE",
                             "MESHTRAIN_ABORT_FILE", "MESHTRAIN_RESTART", "MESHTRAIN_RESTART_REASON",
                             "MESHTRAIN_FAULT", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                             "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS"})
      saved_.push_back(std::make_unique<ScopedEnv>(name, nullptr));
    saved_.push_back(std::make_unique<ScopedEnv>("SLURM_JOB_ID", "42"));
    saved_.push_back(std::make_unique<ScopedEnv>("SLURM_JOB_NODELIST", nodelist));
    saved_.push_back(std::make_unique<ScopedEnv>("SLURM_TASKS_PER_NODE", tasks_per_node));
  }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> saved_;
};

// srun's stand-in, in `dir`: a job step (not `-w NODE true`) appends its
// arguments to launches and the MESHTRAIN_* variables it sees to env, and
// fails (137, as when a rank is killed) the first time; a probe appends its
// node to probes and fails for node1 the first two times, as srun does for
// a node whose slurmd does not answer.
std::string fake_srun(const TempDir& dir) {
  const std::string path = dir / "srun";
  write_file(path, R"sh(#!/bin/sh
here="$(dirname "$0")"
node=""
previous=""
for a in "$@"; do
  [ "$previous" = -w ] && node="$a"
  previous="$a"
done
if [ -n "$node" ]; then
  echo "$*" >> "$here/probes"
  if [ "$node" = node1 ] && [ "$(grep -c ' -w node1 ' "$here/probes")" -le 2 ]; then
    echo "srun: error: Task launch for StepId=42.1 failed on node node1: Communication connection failure" >&2
    exit 1
  fi
  exit 0
fi
echo "$*" >> "$here/launches"
env | grep '^MESHTRAIN_' | sort >> "$here/env"
echo --- >> "$here/env"
[ "$(wc -l < "$here/launches")" -ge 2 ]
exit $(( $? == 0 ? 0 : 137 ))
)sh");
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(CliLaunchSlurm, RanksFillTheAllocationsNodesAndALostNodeIsNamedWaitedForAndRestarted) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const std::string srun = fake_srun(dir);
  SlurmEnvironment slurm("node[0-1],gpu7", "2(x2),1");
  const Result r = run_cli({"launch", "-n", "3", "--srun", srun, "--srun-arg=--exclusive", "--max-restarts", "1", cfg});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "meshtrain launch: Slurm job 42: 3 rank(s) on node0,node1 with srun --mpi=pmix")) << r.err;
  const std::string launches = read_file(dir / "launches");
  EXPECT_EQ(launches.rfind("--mpi=pmix --ntasks=3 --nodes=2 --nodelist=node0,node1 --distribution=block "
                           "--kill-on-bad-exit=1 --export=ALL --exclusive /",
                           0),
            0u)
      << launches;
  EXPECT_TRUE(contains(launches, " train " + cfg + " --set comm.restart_on_failure=true --set comm.max_restarts=1 "
                                   "--set comm.backend=mpi\n"))
      << launches;
  // The failed step: the nodes it used probed with srun, node1 named.
  EXPECT_TRUE(contains(r.err, "meshtrain launch: the job failed: srun exited with code 137; lost node(s) of Slurm job "
                              "42: node1 (exit 1: srun: error: Task launch for StepId=42.1 failed on node node1: "
                              "Communication connection failure)"))
      << r.err;
  const std::string probes = read_file(dir / "probes");
  EXPECT_TRUE(contains(probes, "--jobid=42 --overlap --nodes=1 --ntasks=1 --quiet -w node0 true\n")) << probes;
  EXPECT_FALSE(contains(probes, "gpu7")) << "a node the job does not use was probed: " << probes;
  EXPECT_TRUE(contains(r.err, "waiting up to 300 s for node1 to answer before the restart")) << r.err;
  EXPECT_TRUE(contains(r.err, "restart 1 of 1 from the latest complete checkpoint")) << r.err;
  // The restarted step sees which restart it is (srun passes --export=ALL).
  const std::string env = read_file(dir / "env");
  const std::string second = env.substr(env.find("---\n") + 4);
  EXPECT_FALSE(contains(env.substr(0, env.find("---\n")), "MESHTRAIN_RESTART=")) << env;
  EXPECT_TRUE(contains(second, "MESHTRAIN_RESTART=1\n")) << env;
  EXPECT_TRUE(contains(second, "MESHTRAIN_STOP_FILE=" + (dir / "run") + "/")) << env;
}

TEST(CliLaunchSlurm, RefusalsSayWhatToDo) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const std::string srun = fake_srun(dir);
  {
    SlurmEnvironment slurm("node[0-1]", "2(x2)");
    expect_failure({"launch", "-n", "5", "--srun", srun, cfg},
                   "-n 5 ranks but the allocation of Slurm job 42 has 4 tasks on 2 node(s): lower -n, or ask sbatch");
    expect_failure({"launch", "-n", "2", "--srun", dir / "no-srun", cfg},
                   "cannot find '" + dir / "no-srun" + "' to start the ranks in Slurm job 42");
    expect_failure({"launch", "-n", "2", "--launcher", "srun", "--hostfile", dir / "hosts", "--srun", srun, cfg},
                   "--hostfile, --rsh-agent, --mpirun and --mpirun-arg are for mpirun");
    expect_failure({"launch", "-n", "2", "--srun", srun, "--mpirun-arg=--oversubscribe", cfg}, "run mpirun with --launcher mpirun");
    expect_usage_error({"launch", "-n", "2", "--launcher", "slurm", cfg}, "--launcher", "meshtrain launch");
    ScopedEnv step("SLURM_STEP_ID", "0"), tasks("SLURM_STEP_NUM_TASKS", "4");
    expect_failure({"launch", "-n", "2", "--srun", srun, cfg}, "runs as one of 4 tasks of a job step of Slurm job 42");
  }
  ScopedEnv outside("SLURM_JOB_ID", nullptr);
  expect_failure({"launch", "-n", "2", "--launcher", "srun", "--srun", srun, cfg},
                 "--launcher srun starts the ranks inside a Slurm allocation, and SLURM_JOB_ID is not set");
  expect_failure({"launch", "-n", "2", "--srun-arg=--exclusive", cfg}, "--srun-arg is for srun");
  EXPECT_FALSE(fs::exists(dir / "launches")) << "a refused launch started srun";
}

// --launcher mpirun inside an allocation: mpirun, as outside one.
TEST(CliLaunchSlurm, LauncherMpirunInsideAnAllocation) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const std::string mpirun = dir / "mpirun";
  write_file(mpirun, "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/mpirun-args\"\n");
  ::chmod(mpirun.c_str(), 0755);
  SlurmEnvironment slurm("node[0-1]", "2(x2)");
  const Result r = run_cli({"launch", "-n", "2", "--launcher", "mpirun", "--mpirun", mpirun, cfg});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_file(dir / "mpirun-args").rfind("-np 2 /", 0), 0u) << read_file(dir / "mpirun-args");
}

}  // namespace
}  // namespace meshtrain::cli
