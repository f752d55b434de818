// Data parallelism at R = 2 on the threads backend with the bench-small
// model (micro-batch 4 rows of 256 per replica, random tokens):
//   - step time with overlapped bucket all-reduce vs all reductions after
//     backward, and the exposed communication fraction;
//   - a bucket-size sweep (stage 0);
//   - persistent and peak memory per rank for ZeRO stages 0-3 next to the
//     formulas of docs/math.md (M.26).
// Medians over the timed steps; the machine is shared: compare ratios.
//   - reproducible mode (training.reproducible) against the same layout
//     without it: step time and the extra memory of the gradient leaves.
//   - uneven micro-batch counts per replica (parallel.replica_grad_accum):
//     a window of 4 as 3 + 1 against 2 + 2, default and reproducible mode;
//     the step follows the busiest replica (docs/math.md (M.75)).
//   build/bench/dp_bench [--steps N] [--only reproducible|uneven]
// Under mpirun (one rank per process, MPI backend) only the overlap
// comparison runs; MESHTRAIN_MPI_PROGRESS=off shows it without the
// backend's progress thread:
//   mpirun -np 2 build/bench/dp_bench --backend mpi
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "meshtrain/comm/launch.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/model/presets.h"
#include "meshtrain/train/trainer.h"
#include "random_tokens.h"

using namespace meshtrain;

namespace {

using bench::random_documents;

train::TrainConfig bench_small(int stage, bool overlap, double bucket_mb) {
  train::TrainConfig c;
  c.model = model::bench_small_config();
  c.data.path = "<memory>";
  c.data.seq_len = 256;
  c.training.micro_batch = 4;
  c.optimizer.lr = 3e-4;
  c.optimizer.weight_decay = 0.1;
  c.parallel.dp = 2;
  c.parallel.zero_stage = stage;
  c.parallel.overlap = overlap;
  c.parallel.bucket_mb = bucket_mb;
  return c;
}

struct Result {
  double step_s = 0, comm_s = 0, exposed_s = 0;
  int buckets = 0;
  MemorySnapshot mem;
  parallel::ShardPlan::Persistent formula;
};

// Steps one layout on this rank; rank 0's medians are the result.
Result run_rank(comm::ParallelContext& ctx, const train::TrainConfig& cfg, const data::TokenDataset& ds, int steps) {
  Result r;
  train::Trainer t(cfg, ctx, ds, std::nullopt);
  std::vector<double> times, exposed, comm;
  train::StepMetrics m;
  for (int s = 0; s < steps + 1; ++s) {
    m = t.step();
    if (s == 0) continue;  // warm-up: primitives, allocator cache
    times.push_back(m.seconds);
    exposed.push_back(m.comm_exposed_s);
    comm.push_back(m.comm_s);
  }
  std::sort(comm.begin(), comm.end());
  std::sort(times.begin(), times.end());
  std::sort(exposed.begin(), exposed.end());
  r.step_s = times[times.size() / 2];
  r.exposed_s = exposed[exposed.size() / 2];
  r.comm_s = comm[comm.size() / 2];
  r.buckets = m.comm_buckets;
  r.mem = m.memory;
  r.formula = t.engine().plan().persistent_bytes(t.precision());
  return r;
}

Result run(const train::TrainConfig& cfg, const data::TokenDataset& ds, int steps) {
  Result r;
  std::mutex mu;
  comm::LaunchOptions o;
  o.world_size = 2;
  o.mesh.dp = 2;
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    const Result mine = run_rank(ctx, cfg, ds, steps);
    if (ctx.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    r = mine;
  });
  return r;
}

void print_overlap(const Result& on, const Result& off) {
  std::printf("  overlapped: step %.3f s, comm %.3f s, exposed %.3f s (%.1f%% of the step), %d buckets\n", on.step_s,
              on.comm_s, on.exposed_s, 100 * on.exposed_s / on.step_s, on.buckets);
  std::printf("  after backward: step %.3f s, comm %.3f s, exposed %.3f s (%.1f%% of the step)\n", off.step_s,
              off.comm_s, off.exposed_s, 100 * off.exposed_s / off.step_s);
  std::printf("  speedup from overlap: %.3fx; exposed communication overlapped/after: %.2f\n\n",
              off.step_s / on.step_s, on.exposed_s / off.exposed_s);
}

// One MPI session (MPI can be initialized once per process): both overlap
// settings run inside it.
int run_mpi(const data::TokenDataset& ds, int steps) {
  comm::LaunchOptions o;
  o.backend = comm::Backend::Mpi;
  o.mesh_from_world = [](int world) { return comm::MeshShape{.dp = world}; };
  comm::launch_mpi(o, [&](comm::ParallelContext& ctx) {
    auto cfg = [&](bool overlap) {
      train::TrainConfig c = bench_small(0, overlap, 4);
      c.parallel.dp = ctx.world_size;
      c.comm.backend = "mpi";
      return c;
    };
    const Result on = run_rank(ctx, cfg(true), ds, steps), off = run_rank(ctx, cfg(false), ds, steps);
    if (ctx.rank != 0) return;
    const char* progress = std::getenv("MESHTRAIN_MPI_PROGRESS");
    std::printf("dp_bench (mpi): bench-small model, R=%d processes, micro-batch 4 x 256 per replica, median of %d "
                "steps, progress thread %s\n\noverlap (stage 0, 4 MiB buckets):\n",
                ctx.world_size, steps, progress && std::string(progress) == "off" ? "off" : "on");
    print_overlap(on, off);
  });
  return 0;
}

// Reproducible mode vs off on the same layout, G micro-batches per replica.
void print_reproducible_cost(const data::TokenDataset& ds, int steps) {
  std::printf("\nreproducible mode vs off (R=2, G=2 micro-batches of 4 rows per replica; step-time ratio; peak "
              "gradient-category memory, where the leaf buffers live):\n");
  for (int stage : {0, 3}) {
    auto cfg = [&](bool reproducible) {
      train::TrainConfig c = bench_small(stage, true, 4);
      c.training.grad_accum = 2;
      c.training.reproducible = reproducible;
      return c;
    };
    const Result off = run(cfg(false), ds, steps), on = run(cfg(true), ds, steps);
    const auto grads_peak = [](const Result& r) { return r.mem.peak[int(MemCategory::Grads)]; };
    std::printf("  stage %d: step %.3f s -> %.3f s (%.3fx) | grads peak %.1f -> %.1f MiB | total peak %.1f -> %.1f MiB\n",
                stage, off.step_s, on.step_s, on.step_s / off.step_s, double(grads_peak(off)) / 1048576.0,
                double(grads_peak(on)) / 1048576.0, double(off.mem.total_peak) / 1048576.0,
                double(on.mem.total_peak) / 1048576.0);
  }
}

// A window of 4 micro-batches on R = 2: 3 + 1 against 2 + 2.
void print_uneven_counts(const data::TokenDataset& ds, int steps) {
  std::printf("\nuneven micro-batch counts per replica (R=2, a window of 4 micro-batches of 4 rows; step-time ratio "
              "to 2 + 2; the busiest replica's share predicts 1.5x):\n");
  for (bool reproducible : {false, true}) {
    auto cfg = [&](std::vector<int64_t> counts) {
      train::TrainConfig c = bench_small(0, true, 4);
      c.parallel.replica_grad_accum = counts;  // training.grad_accum follows: the largest (validate)
      c.training.reproducible = reproducible;
      return c;
    };
    const Result even = run(cfg({2, 2}), ds, steps), uneven = run(cfg({3, 1}), ds, steps);
    std::printf("  %s: 2 + 2 %.3f s, 3 + 1 %.3f s a step (%.3fx)\n", reproducible ? "reproducible" : "default",
                even.step_s, uneven.step_s, uneven.step_s / even.step_s);
  }
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", double(b) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  bool mpi = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) mpi = !std::strcmp(argv[++i], "mpi");
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  const auto ds = random_documents(256, 257);
  if (mpi) return run_mpi(ds, steps);
  if (only == "reproducible" || only == "uneven") {
    if (only == "reproducible") print_reproducible_cost(ds, steps);
    else print_uneven_counts(ds, steps);
    return 0;
  }
  std::printf("dp_bench: bench-small model, R=2 threads ranks (1 compute thread each), micro-batch 4 x 256 per "
              "replica, median of %d steps\n\n",
              steps);

  std::printf("overlap (stage 0, 4 MiB buckets):\n");
  const Result on = run(bench_small(0, true, 4), ds, steps), off = run(bench_small(0, false, 4), ds, steps);
  print_overlap(on, off);

  std::printf("bucket sweep (stage 0, overlapped):\n");
  for (double mb : {1.0, 4.0, 16.0, 64.0}) {
    const Result r = run(bench_small(0, true, mb), ds, steps);
    std::printf("  %5.0f MiB: %2d buckets, step %.3f s, comm %.3f s, exposed %.3f s (%.1f%%)\n", mb, r.buckets,
                r.step_s, r.comm_s, r.exposed_s, 100 * r.exposed_s / r.step_s);
  }

  std::printf("\nmemory per rank (MiB), ZeRO stages, R=2 (formula on padded sizes | measured current after step "
              "| peak this step):\n");
  std::printf("  stage | params formula/meas | grads formula/meas | optimizer formula/meas | gathered peak | grad "
              "buffers peak | activations peak | total peak | step s\n");
  for (int stage : {0, 1, 2, 3}) {
    const Result r = run(bench_small(stage, true, 4), ds, steps);
    const auto& m = r.mem;
    auto cur = [&](MemCategory c) { return m.current[int(c)]; };
    auto peak = [&](MemCategory c) { return m.peak[int(c)]; };
    std::printf("  %5d | %8s / %-8s | %8s / %-8s | %8s / %-8s | %8s | %8s | %8s | %8s | %.3f\n", stage,
                mib(r.formula.params).c_str(), mib(cur(MemCategory::Params)).c_str(), mib(r.formula.grads).c_str(),
                mib(cur(MemCategory::Grads)).c_str(), mib(r.formula.optimizer).c_str(),
                mib(cur(MemCategory::Optimizer)).c_str(), mib(peak(MemCategory::Gathered)).c_str(),
                mib(peak(MemCategory::Comm)).c_str(), mib(peak(MemCategory::Activations)).c_str(),
                mib(m.total_peak).c_str(), r.step_s);
  }
  print_reproducible_cost(ds, steps);
  print_uneven_counts(ds, steps);
  return 0;
}
