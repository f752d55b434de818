// meshtrain bench comm [--backend threads|mpi] [--ranks N] [--min-bytes 4K] [--max-bytes 256M] [--iters N] [--ops ...]
//                     [--hierarchical]
// meshtrain bench machine [--out FILE.toml] [--ranks N] [--max-bytes 16M] [--hostfile FILE [--rsh-agent AGENT]]
// meshtrain bench peak [--dtypes f32,bf16] [--cores N]
#include <cstdio>

#include "meshtrain/app/bench.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* bench = add_command(root, "bench", "benchmarks", "meshtrain bench comm --ranks 2");
  bench->require_subcommand(1);
  auto* cmd = add_command(*bench, "comm",
                          "collective bandwidth and latency, with the alpha-beta fit of docs/math.md (M.20), (M.23)",
                          "meshtrain bench comm --ranks 2 --max-bytes 16M --ops all_reduce,all_gather");
  auto q = std::make_shared<app::BenchCommRequest>();
  cmd->add_option("--backend", q->backend, "threads, or mpi under mpirun")->check(CLI::IsMember({"threads", "mpi"}));
  cmd->add_option("--ranks", q->ranks, "ranks of the threads backend")->check(CLI::Range(1, 1024));
  const CLI::Validator size([](std::string& s) { return app::size_error(s); }, "SIZE");
  cmd->add_option("--min-bytes", q->min_bytes, "smallest message (4K, 16M, ...)")->check(size);
  cmd->add_option("--max-bytes", q->max_bytes, "largest message")->check(size);
  cmd->add_option("--iters", q->iters, "timed calls per size at least")->check(CLI::Range(1, 100000));
  cmd->add_option("--ops", q->ops, "collectives to measure")
      ->delimiter(',')
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "barrier"}));
  cmd->add_flag("--hierarchical", q->hierarchical,
                "also time all_reduce, reduce_scatter and all_gather composed inside and across nodes "
                "(docs/comm.md, \"Hierarchical collectives\"), alternating with the flat ones");
  cmd->callback([q, &action] {
    action = [q] {
      app::bench_comm(*q);
      return 0;
    };
  });

  auto* machine = add_command(*bench, "machine",
                              "this machine's profile for plan --hardware: GEMM rates, copy bandwidth, collectives "
                              "inside and across nodes",
                              "meshtrain bench machine --out configs/hardware/cpu-this-machine.toml\n"
                              "  meshtrain bench machine --hostfile hosts --out cluster.toml");
  auto m = std::make_shared<app::BenchMachineRequest>();
  machine->add_option("--out", m->out, "write the profile here (TOML); default: stdout");
  machine->add_option("--ranks", m->ranks, "ranks of the collectives on this machine; 0: the cores (at least 2)")
      ->check(CLI::Range(0, 1024));
  machine->add_option("--max-bytes", m->max_bytes, "largest collective message")->check(size);
  machine->add_option("--hostfile", m->hostfile,
                      "measure a cluster: one rank on every slot of this Open MPI hostfile's hosts, under mpirun "
                      "(as meshtrain launch --hostfile)");
  machine->add_option("--rsh-agent", m->rsh_agent,
                      "how mpirun starts ranks on the hostfile's hosts (default ssh; the emulated cluster's "
                      "scripts/cluster-rsh.sh)");
  machine->callback([m, &action] {
    action = [m] {
      std::fputs(app::bench_machine(*m).c_str(), stdout);
      return 0;
    };
  });

  auto* peak = add_command(*bench, "peak",
                           "measure the per-core peak that training's MFU divides by, and cache it again",
                           "meshtrain bench peak --dtypes f32,bf16");
  auto p = std::make_shared<app::BenchPeakRequest>();
  peak->add_option("--dtypes", p->dtypes, "compute dtypes to measure")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  peak->add_option("--cores", p->cores, "cores busy at once (as in a run on that many); 0: all this process may use")
      ->check(CLI::Range(0, 4096));
  peak->callback([p, &action] {
    action = [p] {
      std::fputs(app::bench_peak(*p).c_str(), stdout);
      return 0;
    };
  });
}

const bool registered = register_command(90, setup);

}  // namespace
}  // namespace meshtrain::cli
