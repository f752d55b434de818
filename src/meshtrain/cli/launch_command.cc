// meshtrain launch -n N [--launcher auto|mpirun|srun] [--hostfile FILE [--rsh-agent AGENT]] [--allow-cross-node-tp]
//   [--mpirun PATH] [--mpirun-arg ARG ...] [--srun PATH] [--srun-arg ARG ...] [--max-restarts K]
//   [--elastic [--min-ranks M]] CONFIG [--set ...]
#include "meshtrain/app/training.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "launch",
                          "run a training job under mpirun (srun inside a Slurm allocation) and relaunch it from its latest "
                          "checkpoint when it fails",
                          "meshtrain launch -n 2 --max-restarts 3 configs/demo.toml --set parallel.dp=2");
  auto q = std::make_shared<app::LaunchRequest>();
  cmd->add_option("-n,--np", q->np, "ranks (mpirun -np, srun --ntasks)")->required()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--launcher", q->launcher,
                  "what starts the ranks: auto (srun inside a Slurm allocation, SLURM_JOB_ID set, unless --hostfile; "
                  "else mpirun), mpirun or srun")
      ->check(CLI::IsMember({"auto", "mpirun", "srun"}));
  cmd->add_option("--mpirun", q->mpirun, "the mpirun to run");
  cmd->add_option("--mpirun-arg", q->mpirun_args, "an extra mpirun argument (repeatable)")->allow_extra_args(false);
  cmd->add_option("--hostfile", q->hostfile, "run the ranks on the hosts of this Open MPI hostfile (`node0 slots=2`)");
  cmd->add_option("--rsh-agent", q->rsh_agent,
                  "how mpirun starts ranks on the hostfile's hosts (default ssh; the emulated cluster's "
                  "scripts/cluster-rsh.sh)");
  cmd->add_option("--srun", q->srun, "the srun to run (inside a Slurm allocation)");
  cmd->add_option("--srun-arg", q->srun_args, "an extra srun argument (repeatable)")->allow_extra_args(false);
  cmd->add_flag("--allow-cross-node-tp", q->allow_cross_node_tp,
                "run tp and cp groups whose ranks are on different nodes instead of refusing the layout");
  add_restart_options(cmd, q->train.max_restarts, q->train.elastic, q->train.min_ranks);
  cmd->add_option("CONFIG", q->train.config, "training config (TOML), as for `meshtrain train`")->required();
  cmd->add_option("--set", q->train.overrides, "override a config key (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  cmd->callback([q, &action] { action = [q] { return app::launch(*q); }; });
}

const bool registered = register_command(15, setup);

}  // namespace
}  // namespace meshtrain::cli
