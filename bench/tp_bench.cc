// Tensor parallelism on the threads backend with the bench-small model,
// against data parallelism and one rank on the same machine and the same
// global batch (8 rows of 256 tokens per step):
//   one rank, 2 compute threads          micro-batch 8
//   dp = 2, 1 compute thread per rank     micro-batch 4 per replica
//   tp = 2 (and + sequence parallelism), 1 compute thread per rank, micro-batch 8,
//   each with parallel.tp_overlap on (the backward's input-gradient sums behind
//   the weight gradients, docs/math.md (M.78)) and off
// Prints per layout the median step time, tokens/s, the communication the
// rank waited for (exposed) and, for tp, the time its sums ran behind the
// weight gradients (overlapped), the bytes each block moved per step measured by the
// regions next to the ring formula 8 (t-1)/t b s h e, and the peak
// activation bytes next to activation_bytes()'s prediction. --reproducible
// runs every layout in reproducible mode (training.reproducible: the
// canonical blocks, docs/math.md (M.73)).
//   build/bench/tp_bench [--steps N] [--reproducible]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "meshtrain/comm/launch.h"
#include "meshtrain/model/activation_bytes.h"
#include "meshtrain/model/presets.h"
#include "meshtrain/train/trainer.h"
#include "random_tokens.h"
#include "timed_steps.h"

using namespace meshtrain;

namespace {

using bench::random_documents;

struct Layout {
  const char* name;
  int dp, tp;
  bool sp;
  bool overlap = true;
};

bool g_reproducible = false;

train::TrainConfig config(const Layout& l) {
  train::TrainConfig c;
  c.training.reproducible = g_reproducible;
  c.model = model::bench_small_config();
  c.data.path = "<memory>";
  c.data.seq_len = 256;
  c.training.micro_batch = 8 / l.dp;  // the same global batch of 8 rows
  c.optimizer.lr = 3e-4;
  c.optimizer.weight_decay = 0.1;
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.tp_overlap = l.overlap;
  return c;
}

struct Result {
  double step_s = 0, exposed_s = 0, tokens_per_s = 0, overlapped_s = 0;
  train::TpMetrics tp;
  int64_t peak_activations = 0, predicted_activations = 0;
};

Result run(const Layout& l, const data::TokenDataset& ds, int steps) {
  Result r;
  std::mutex mu;
  comm::LaunchOptions o;
  o.mesh.dp = l.dp;
  o.mesh.tp = l.tp;
  o.world_size = o.mesh.world_size();  // threads per rank: max(1, cores / ranks)
  const train::TrainConfig cfg = config(l);
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    train::Trainer t(cfg, ctx, ds, std::nullopt);
    const bench::StepMedians s =
        bench::timed_steps(ctx, t, steps, [](const train::StepMetrics& m) { return m.comm_exposed_s + m.tp.seconds; });
    if (ctx.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    r.step_s = s.step_s;
    r.exposed_s = s.exposed_s;
    r.tokens_per_s = s.tokens_per_s;
    r.tp = s.last.tp;
    r.overlapped_s = s.last.tp.overlapped_seconds;
    r.peak_activations = s.last.memory.peak[int(MemCategory::Activations)];
    const int64_t n = cfg.training.micro_batch * cfg.data.seq_len;
    r.predicted_activations = model::activation_bytes(t.config().model, t.model_spec(), n,
                                                      t.model().stream_rows(n), DType::F32)
                                  .total(cfg.model.n_layers);
  });
  return r;
}

double mib(int64_t b) { return double(b) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reproducible")) g_reproducible = true;
  }
  const auto ds = random_documents(256, 257);
  const model::ModelConfig mc = [] {
    auto c = model::bench_small_config();
    c.finalize();
    return c;
  }();
  std::printf("tp_bench: bench-small, global batch 8 x 256 tokens per step, threads backend, median of %d steps%s\n\n",
              steps, g_reproducible ? ", reproducible mode" : "");
  std::printf("%-26s | %9s | %9s | %15s | %12s | %27s | %28s\n", "layout", "step s", "tokens/s", "exposed comm s",
              "overlapped s", "bytes/block/step meas|formula", "activations MiB peak|predicted");
  std::vector<Result> results;
  for (const Layout& l : {Layout{"one rank, 2 threads", 1, 1, false}, Layout{"dp=2", 2, 1, false},
                          Layout{"tp=2", 1, 2, false}, Layout{"tp=2, sp=on", 1, 2, true},
                          Layout{"tp=2, overlap=off", 1, 2, false, false},
                          Layout{"tp=2, sp=on, overlap=off", 1, 2, true, false}}) {
    const Result r = run(l, ds, steps);
    results.push_back(r);
    // Ring bytes per rank per block per step: 8 (t-1)/t b s h e for the 8 row-block regions of a step.
    const int64_t bsh_e = 8 * 256 * mc.d_model * 4;
    const int64_t formula = 8 * (l.tp - 1) * bsh_e / l.tp;
    int64_t measured = 0;
    for (int64_t b : r.tp.layer_ring_bytes) measured += b;
    std::printf("%-26s | %9.3f | %9.0f | %7.3f (%4.1f%%) | %12.3f | %12.1f | %12.1f MiB | %12.1f | %12.1f\n",
                l.name, r.step_s, r.tokens_per_s, r.exposed_s, 100 * r.exposed_s / r.step_s, r.overlapped_s,
                mib(measured), mib(formula), mib(r.peak_activations), mib(r.predicted_activations));
  }
  std::printf("\ntp=2 throughput / dp=2: %.3f (target >= 0.95); tp=2 sp=on / dp=2: %.3f\n",
              results[2].tokens_per_s / results[1].tokens_per_s, results[3].tokens_per_s / results[1].tokens_per_s);
  std::printf("overlap on / off: tp=2 %.3f, tp=2 sp=on %.3f (throughput)\n",
              results[2].tokens_per_s / results[4].tokens_per_s, results[3].tokens_per_s / results[5].tokens_per_s);
  return 0;
}
