// Context parallelism on the threads backend with the bench-small model on
// long sequences (one row per step, one document per row), cp = 2 against
// one rank on the same machine and the same global batch:
//   one rank, 2 compute threads
//   cp = 2, 1 compute thread per rank (each rank holds 2 of the 4 chunks)
// Prints per layout and sequence length the median step time, tokens/s,
// the communication time the ranks waited for (ring blocks they had to wait
// for after computing the previous one, plus the gradient reduction), the
// K/V bytes the ring moved per rank per step next to docs/math.md (M.51)
// (forward L x 2 b s h_kv bytes (cp - 1) / cp; backward the K/V again plus
// dK/dV home: L x 2 b s h_kv bytes (2 cp - 1) / cp), and the peak
// activation bytes per rank.
// --reproducible runs both layouts in reproducible mode (docs/math.md
// (M.74): canonical token blocks, K/V all-gathered instead of the ring, so
// the ring's byte columns read 0).
//   build/bench/cp_bench [--steps N] [--seq S ...] [--reproducible]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

bool g_reproducible = false;

struct Result {
  double step_s = 0, exposed_s = 0, tokens_per_s = 0;
  model::CpCommStats ring;
  int64_t peak_activations = 0;
};

train::TrainConfig config(int cp, int64_t seq) {
  train::TrainConfig c;
  c.model = model::bench_small_config();
  c.model.max_seq_len = seq;
  c.data.path = "<memory>";
  c.data.seq_len = seq;
  c.training.micro_batch = 1;
  c.optimizer.lr = 3e-4;
  c.parallel.cp = cp;
  c.training.reproducible = g_reproducible;
  return c;
}

Result run(int cp, int64_t seq, const data::TokenDataset& ds, int steps) {
  Result r;
  std::mutex mu;
  comm::LaunchOptions o;
  o.mesh.cp = cp;
  o.world_size = o.mesh.world_size();  // threads per rank: max(1, cores / ranks)
  const train::TrainConfig cfg = config(cp, seq);
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    train::Trainer t(cfg, ctx, ds, std::nullopt);
    const bench::StepMedians s = bench::timed_steps(
        ctx, t, steps, [](const train::StepMetrics& m) { return m.comm_exposed_s + m.cp.ring.exposed_s; });
    if (ctx.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    r.step_s = s.step_s;
    r.exposed_s = s.exposed_s;
    r.tokens_per_s = s.tokens_per_s;
    r.ring = s.last.cp.ring;
    r.peak_activations = s.last.memory.peak[int(MemCategory::Activations)];
  });
  return r;
}

double mib(double b) { return b / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  std::vector<int64_t> seqs;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seq") && i + 1 < argc) seqs.push_back(std::atoll(argv[++i]));
    else if (!std::strcmp(argv[i], "--reproducible")) g_reproducible = true;
  }
  if (seqs.empty()) seqs = {1024, 4096};
  const model::ModelConfig mc = model::bench_small_config();
  std::printf("cp_bench: bench-small, one row of one document per step, threads backend, median of %d steps%s\n\n",
              steps, g_reproducible ? ", reproducible mode" : "");
  std::printf("%5s | %-20s | %8s | %9s | %15s | %29s | %29s | %15s\n", "seq", "layout", "step s", "tokens/s",
              "exposed comm s", "K/V fwd MiB/rank meas|formula", "K/V bwd MiB/rank meas|formula",
              "activations MiB");
  for (int64_t seq : seqs) {
    const auto ds = bench::random_documents(8, int(seq) + 1);
    const Result one = run(1, seq, ds, steps), two = run(2, seq, ds, steps);
    // L x 2 (K and V) x b s h_kv x 4 bytes, times (cp - 1) / cp forward and (2 cp - 1) / cp backward.
    const double kv = double(mc.n_layers) * 2 * seq * mc.n_kv_heads * mc.head_dim * 4;
    for (const auto& [name, r, cp] : {std::tuple{"one rank, 2 threads", one, 1}, std::tuple{"cp=2", two, 2}}) {
      std::printf("%5lld | %-20s | %8.3f | %9.0f | %7.3f (%4.1f%%) | %13.2f | %13.2f | %13.2f | %13.2f | %15.1f\n",
                  static_cast<long long>(seq), name, r.step_s, r.tokens_per_s, r.exposed_s,
                  100 * r.exposed_s / r.step_s, mib(double(r.ring.forward_bytes)), mib(kv * (cp - 1) / cp),
                  mib(double(r.ring.backward_bytes)), mib(kv * (2 * cp - 1) / cp * (cp > 1)),
                  mib(double(r.peak_activations)));
    }
    std::printf("%5lld | cp=2 / one rank: tokens/s %.3f, activations per rank %.3f\n", static_cast<long long>(seq),
                two.tokens_per_s / one.tokens_per_s, double(two.peak_activations) / double(one.peak_activations));
  }
  return 0;
}
