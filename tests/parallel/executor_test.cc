// The one executor running pipeline programs across two ranks of the
// threads backend: GPipe and 1F1B over micro-batches give each stage's
// gradients bit for bit as the whole model on one rank accumulates them.
#include "meshtrain/parallel/executor.h"

#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/comm/launch.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

std::vector<std::vector<float>> whole_model_grads(const model::ModelConfig& cfg, const OwnedBatch& b, int m,
                                                  double* loss) {
  auto alloc = CachingAllocator::create();
  model::Transformer whole(cfg, alloc);
  whole.params().zero_grads();
  *loss = 0;
  for (int mb = 0; mb < m; ++mb) *loss += whole.forward_backward(b.view(), 0.125).loss_sum;
  std::vector<std::vector<float>> g;
  for (int u = 0; u < whole.num_units(); ++u) g.push_back(to_vector<float>(whole.params().unit_grads(u)));
  return g;
}

// The stage of a 2-rank pipeline this rank holds: the segments of its chunk.
model::ModelPartition stage_partition(const model::ModelConfig& cfg, int pp_rank) {
  const auto chunks = parallel::pipeline_chunks(cfg.n_layers, 2, 1, {});
  model::ModelPartition part;
  for (int s = chunks[size_t(pp_rank)].first; s <= chunks[size_t(pp_rank)].last; ++s) part.segments.push_back(s);
  return part;
}

parallel::Program stage_program(const std::string& schedule, int m, const model::ModelConfig& cfg, int pp_rank,
                                const model::Transformer& stage) {
  return parallel::expand(parallel::make_schedule(schedule, 2, m), pp_rank,
                          parallel::pipeline_chunks(cfg.n_layers, 2, 1, {}),
                          [&](int s) { return stage.segment_units(s); }, {});
}

}  // namespace

TEST(Executor, PipelineSchedulesMatchTheWholeModelBitwise) {
  auto cfg = tiny_llama();
  cfg.n_layers = 3;  // segments 0..4: chunk 0 = {0, 1, 2}, chunk 1 = {3, 4}
  const OwnedBatch batch = tiny_batch();
  const int m = 3;
  double ref_loss = 0;
  const auto ref = whole_model_grads(cfg, batch, m, &ref_loss);
  for (const std::string name : {"gpipe", "1f1b"}) {
    SCOPED_TRACE(name);
    std::mutex mu;
    std::vector<std::vector<float>> got(ref.size());
    double loss = 0;
    comm::LaunchOptions o;
    o.world_size = 2;
    o.mesh.pp = 2;
    comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
      const int r = ctx.mesh.coord(comm::Axis::Pp);
      model::Transformer stage(cfg, ctx.allocator, {}, stage_partition(cfg, r));
      stage.params().zero_grads();
      parallel::StepExecutor exec(stage, nullptr, &ctx.group("pp"));
      const auto prog = stage_program(name, m, cfg, r, stage);
      const auto res = exec.run(prog, [&](int) { return batch.view(); }, {true, 0.125, false});
      std::lock_guard<std::mutex> lock(mu);
      loss += res.loss_sum;
      for (int u = 0; u < stage.num_units(); ++u)
        if (stage.holds(u)) got[size_t(u)] = to_vector<float>(stage.params().unit_grads(u));
    });
    EXPECT_EQ(loss, ref_loss);
    for (size_t u = 0; u < ref.size(); ++u) EXPECT_EQ(got[u], ref[u]) << "unit " << u;
  }
}

TEST(Executor, AFailingStageStopsTheOtherWithItsError) {
  const auto cfg = tiny_llama();
  const OwnedBatch batch = tiny_batch();
  OwnedBatch bad = batch;
  bad.positions[0] = 999;  // outside max_seq_len: the first stage's embedding rejects it
  comm::LaunchOptions o;
  o.world_size = 2;
  o.mesh.pp = 2;
  o.group.timeout = comm::Millis(20000);
  const auto start = std::chrono::steady_clock::now();
  try {
    comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
      const int r = ctx.mesh.coord(comm::Axis::Pp);
      model::Transformer stage(cfg, ctx.allocator, {}, stage_partition(cfg, r));
      parallel::StepExecutor exec(stage, nullptr, &ctx.group("pp"));
      const auto prog = stage_program("1f1b", 2, cfg, r, stage);
      exec.run(prog, [&](int mb) { return mb == 1 ? bad.view() : batch.view(); }, {true, 0.1, false});
    });
    FAIL() << "the failure must reach the caller";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("position id 999"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "the peer must not wait for the timeout";
}
