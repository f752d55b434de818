// Pipeline schedules on the threads backend, one compute thread per stage,
// a model of 8 equal blocks (d_model 192, sequence 64, micro-batch 4 rows)
// split in balanced stages (pp_layers given: 8 / (p v) blocks per chunk):
//   - the measured bubble of GPipe, 1F1B, interleaved 1F1B (v = 2) and
//     ZB-H1 at p = 2, 4 and m = 2, 4, 8, next to the schedule's unit-time
//     formula and the costed simulation of the same schedule with the
//     measured median F, B, W of each chunk;
//   - peak activation memory per stage, GPipe vs 1F1B;
//   - the step time of ZB-H1 and interleaved relative to 1F1B;
//   - each stage's wait at its receives and the part of it after the sender
//     had finished the message's action (the exposed transfer; the largest
//     stage's median).
// Medians over the timed steps (the first step warms the caches up). With
// more stages than cores, stages share cores and time-slice: the measured
// busy time then includes waiting for a core; the costed simulation, from
// per-action times, is the prediction to read there.
//   build/bench/pipeline_bench [--steps N] [--p 2,4]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/trainer.h"

using namespace meshtrain;

namespace {

data::TokenDataset documents(int n, int len) {
  CounterRng rng(11);
  std::vector<std::vector<int32_t>> docs(size_t(n), std::vector<int32_t>(size_t(len), 0));
  for (int d = 0; d < n; ++d)
    for (int i = 0; i < len; ++i) docs[size_t(d)][size_t(i)] = int32_t(32 + rng.bits(uint64_t(d), uint64_t(i))[0] % 95);
  return data::TokenDataset::from_documents(docs);
}

train::TrainConfig config(const std::string& schedule, int p, int m) {
  train::TrainConfig c;
  c.model.vocab_size = 259;
  c.model.d_model = 192;
  c.model.n_layers = 8;
  c.model.n_heads = 6;
  c.model.n_kv_heads = 2;
  c.model.ffn_hidden = 512;
  c.model.max_seq_len = 64;
  c.data.path = "<memory>";
  c.data.seq_len = 64;
  c.training.micro_batch = 4;
  c.training.grad_accum = m;
  c.optimizer.lr = 1e-3;
  c.parallel.pp = p;
  c.parallel.schedule = schedule;
  c.parallel.virtual_stages = schedule == "interleaved" ? 2 : 1;
  c.parallel.pp_layers.assign(size_t(p * c.parallel.virtual_stages), 8 / (p * c.parallel.virtual_stages));
  c.metrics.jsonl = "";
  c.validate();
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double step_s = 0, bubble = 0, formula = 0, costed = 0;
  double receive_wait_s = 0, exposed_s = 0;  // the largest stage's
  std::vector<int64_t> peak_activations;  // per stage
};

Result run(const std::string& schedule, int p, int m, const data::TokenDataset& ds, int steps) {
  const train::TrainConfig cfg = config(schedule, p, m);
  Result r;
  r.peak_activations.assign(size_t(p), 0);
  std::mutex mu;
  comm::LaunchOptions o;
  o.world_size = p;
  o.mesh = train::mesh_for(cfg, p);
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    set_compute_threads(1);
    train::Trainer t(cfg, ctx, ds, std::nullopt);
    std::vector<double> times, bubbles, costed, waits, exposed;
    int64_t act = 0;
    for (int s = 0; s < steps + 1; ++s) {
      const train::StepMetrics met = t.step();
      if (s == 0) continue;
      times.push_back(met.seconds);
      bubbles.push_back(met.pipeline_bubble);
      waits.push_back(met.pipeline_receive_wait_s);
      exposed.push_back(met.pipeline_transfer_exposed_s);
      const auto& tl = t.pipeline_timeline();
      costed.push_back(
          parallel::simulate(t.pipeline_schedule(), tl.chunk_costs(t.pipeline_schedule().chunks())).bubble);
      act = std::max(act, met.memory.peak[int(MemCategory::Activations)]);
      r.formula = met.pipeline_bubble_formula;
    }
    std::lock_guard<std::mutex> lock(mu);
    r.peak_activations[size_t(ctx.mesh.coord(comm::Axis::Pp))] = act;
    r.receive_wait_s = std::max(r.receive_wait_s, median(waits));
    r.exposed_s = std::max(r.exposed_s, median(exposed));
    if (ctx.rank == 0) r.step_s = median(times), r.bubble = median(bubbles), r.costed = median(costed);
  });
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  std::vector<int> ps = {2, 4};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--p") && i + 1 < argc) {
      ps.clear();
      for (const char* s = argv[++i]; *s; ++s)
        if (*s >= '0' && *s <= '9') ps.push_back(*s - '0');
    }
  }
  const auto ds = documents(512, 65);
  std::printf(
      "pipeline_bench: 8 blocks, d_model 192, micro-batch 4 x 64, threads backend, 1 compute thread per "
      "stage, median of %d steps\n\n",
      steps);
  std::printf("bubble: measured | formula (unit time) | costed simulation (measured F, B, W per chunk)\n");
  std::printf("  %-12s %2s %2s | %8s | %8s | %8s | %8s | %8s | %8s\n", "schedule", "p", "m", "measured", "formula",
              "costed", "step s", "recv wait", "exposed");
  std::map<std::tuple<std::string, int, int>, Result> all;
  for (int p : ps)
    for (int m : {2, 4, 8})
      for (std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
        const Result r = run(schedule, p, m, ds, steps);
        all[{schedule, p, m}] = r;
        std::printf("  %-12s %2d %2d | %8.3f | %8.3f | %8.3f | %8.3f | %8.4f | %8.4f\n", schedule.c_str(), p, m, r.bubble,
                    r.formula, r.costed, r.step_s, r.receive_wait_s, r.exposed_s);
        std::fflush(stdout);
      }
  std::printf("\npeak activation memory per stage, m = 8:\n");
  for (int p : ps)
    for (std::string schedule : {"gpipe", "1f1b"}) {
      const Result& r = all.at({schedule, p, 8});
      std::printf("  p=%d %-6s:", p, schedule.c_str());
      for (int64_t b : r.peak_activations) std::printf(" %10s", format_bytes(b).c_str());
      std::printf("\n");
    }
  std::printf("\nstep time relative to 1F1B (same p, m; < 1 is faster):\n");
  for (int p : ps)
    for (int m : {2, 4, 8}) {
      const double base = all.at({"1f1b", p, m}).step_s;
      std::printf("  p=%d m=%d: zb-h1 %.3f, interleaved %.3f\n", p, m, all.at({"zb-h1", p, m}).step_s / base,
                  all.at({"interleaved", p, m}).step_s / base);
    }
  return 0;
}
