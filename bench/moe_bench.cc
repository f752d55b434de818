// Mixture of experts on the threads backend: a bench-small-width MoE (8
// experts of ffn 704, top-2, every block; the same global batch of 8 rows of
// 256 tokens per step) at
//   one rank, 2 compute threads
//   dp = 2, ep = 1 (experts replicated, each rank computes all of them)
//   dp = 2, ep = 2 (each rank computes 4 experts; tokens travel by all-to-all)
// Prints per layout the median step time and tokens/s, the all-to-all
// payload all ranks sent per step (dispatch + combine, forward) next to
// docs/math.md (M.60)'s 2 N k d b_e, and at ep = 2 the drop fraction and most loaded
// expert's share at capacity factors 0 (dropless), 1.0 and 1.25, the
// parameter + gradient + optimizer state rank 0 holds (experts held by their
// owners only: ep = 2 holds half of them), and the reproducible mode's cost
// at ep = 2 (a gradient tree lane per source rank).
//   build/bench/moe_bench [--steps N]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "meshtrain/comm/launch.h"
#include "meshtrain/model/presets.h"
#include "meshtrain/train/trainer.h"
#include "random_tokens.h"
#include "timed_steps.h"

using namespace meshtrain;

namespace {

struct Layout {
  const char* name;
  int dp, ep;
  double capacity;
  bool reproducible = false;
};

train::TrainConfig config(const Layout& l) {
  train::TrainConfig c;
  c.model = model::bench_small_config();
  c.model.n_experts = 8;
  c.model.experts_top_k = 2;
  c.model.ffn_hidden = 704;  // half the dense width: 2 active experts cost about one dense feed-forward
  c.model.moe_capacity_factor = l.capacity;
  c.data.path = "<memory>";
  c.data.seq_len = 256;
  c.training.micro_batch = 8 / l.dp;  // the same global batch of 8 rows
  c.optimizer.lr = 3e-4;
  c.parallel.dp = l.dp;
  c.parallel.ep = l.ep;
  c.training.reproducible = l.reproducible;
  return c;
}

struct Result {
  double step_s = 0, tokens_per_s = 0;
  int64_t state_bytes = 0;  // parameters + gradients + optimizer state on rank 0, measured
  train::MoeMetrics moe;
};

Result run(const Layout& l, const data::TokenDataset& ds, int steps) {
  Result r;
  std::mutex mu;
  comm::LaunchOptions o;
  o.mesh.dp = l.dp;
  o.mesh.ep = l.ep;
  o.world_size = o.mesh.world_size();  // threads per rank: max(1, cores / ranks)
  const train::TrainConfig cfg = config(l);
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    train::Trainer t(cfg, ctx, ds, std::nullopt);
    const bench::StepMedians s =
        bench::timed_steps(ctx, t, steps, [](const train::StepMetrics& m) { return m.comm_exposed_s; });
    if (ctx.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    r.step_s = s.step_s;
    r.tokens_per_s = double(s.last.computed_positions) / r.step_s;
    r.moe = s.last.moe;
    const auto& tr = ctx.allocator->tracker();
    r.state_bytes = tr.current(MemCategory::Params) + tr.current(MemCategory::Grads) + tr.current(MemCategory::Optimizer);
  });
  return r;
}

double mib(double b) { return b / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
  const auto ds = bench::random_documents(256, 257);
  std::printf("moe_bench: bench-small widths, 8 experts x ffn 704, top-2, global batch 8 x 256 tokens per step, "
              "threads backend, median of %d steps\n\n", steps);
  std::printf("%-30s | %8s | %9s | %27s | %6s | %10s | %14s\n", "layout", "step s", "tokens/s",
              "a2a MiB/step meas|formula", "drop", "top share", "state MiB/rank");
  std::vector<Result> results;
  for (const Layout& l : {Layout{"one rank, 2 threads", 1, 1, 0.0}, Layout{"dp=2, ep=1", 2, 1, 0.0},
                          Layout{"dp=2, ep=2", 2, 2, 0.0}, Layout{"dp=2, ep=2, capacity 1.0", 2, 2, 1.0},
                          Layout{"dp=2, ep=2, capacity 1.25", 2, 2, 1.25},
                          Layout{"dp=2, ep=2, reproducible", 2, 2, 0.0, true}}) {
    const Result r = run(l, ds, steps);
    results.push_back(r);
    std::printf("%-30s | %8.3f | %9.0f | %12.2f | %12.2f | %6.3f | %10.3f | %14.1f\n", l.name, r.step_s,
                r.tokens_per_s, mib(double(r.moe.a2a_bytes)), mib(r.moe.a2a_formula_bytes), r.moe.drop_fraction,
                r.moe.max_expert_share, mib(double(r.state_bytes)));
  }
  std::printf("\nep=2 / ep=1 step time at dp=2: %.3f; ep=2 throughput / one rank: %.3f; state per rank ep=2 / ep=1: "
              "%.3f; reproducible / default step time at ep=2: %.3f\n",
              results[2].step_s / results[1].step_s, results[2].tokens_per_s / results[0].tokens_per_s,
              double(results[2].state_bytes) / double(results[1].state_bytes), results[5].step_s / results[2].step_s);
  return 0;
}
