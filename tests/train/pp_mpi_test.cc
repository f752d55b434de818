// Pipeline parallelism across MPI processes: every process computes the
// single-rank reference in-process (threads backend, one rank), then trains
// the layout across the MPI world and compares. pp = world alone is bitwise
// (transfers are copies, the norm is canonical); dp x pp within 1e-6 (MPI
// does not promise the data-parallel reduction's order).
//   mpirun -np 4 --oversubscribe --allow-run-as-root train_pp_mpi_test
// With --fail-stage: the last stage meets a bad target in its second
// micro-batch mid-schedule; the job must end with that error (no hang).
#include <gtest/gtest.h>

#include <cstring>

#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/equivalence.h"
#include "support/numeric.h"
#include "train/mpi_test_main.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

train::TrainConfig base_config() {
  auto c = tiny_train_config();
  c.model.n_layers = 8;
  c.training.micro_batch = 1;
  c.training.grad_accum = 4;
  c.training.threads = 1;  // the reference's team size = each process's (oneDNN's AVX2 GEMM sums by team size)
  c.validate();
  return c;
}

std::vector<double> run_single_rank(train::TrainConfig cfg, const data::TokenDataset& ds) {
  std::vector<double> p;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) t.step();
    p = train::gather_model(t, false);
  });
  return p;
}

comm::ParallelContext mpi_context(const std::shared_ptr<comm::ProcessGroup>& world, int pp, int tp = 1) {
  comm::ParallelContext ctx;
  ctx.rank = world->rank();
  ctx.world_size = world->size();
  ctx.world = world;
  comm::MeshShape shape;
  shape.pp = pp;
  shape.tp = tp;
  shape.dp = world->size() / (pp * tp);
  ctx.mesh = comm::Mesh::create(shape, world);
  ctx.allocator = CachingAllocator::create();
  return ctx;
}

int fail_mid_schedule() {
  const auto ds = varied_documents(64, 5);
  comm::LaunchOptions o;
  o.backend = comm::Backend::Mpi;
  o.group.timeout = comm::Millis(60000);
  o.mesh_from_world = [](int world) {
    comm::MeshShape m;
    m.pp = world;
    return m;
  };
  comm::launch(o, [&](comm::ParallelContext& ctx) {
    auto cfg = train::with_layout(base_config(), train::parse_layout("pp=" + std::to_string(ctx.world_size)));
    train::Trainer t(cfg, ctx, ds, std::nullopt);
    t.step();
    data::Batch window;
    t.loader().next_window(4, 0, 4, &window);
    window.targets[size_t(window.seq + 1)] = 9999;  // micro-batch 1, read by the last stage's loss
    t.step_on(window);
  });
  return 0;  // not reached: launch ends the job on the failure
}

}  // namespace

TEST(PipelineMpi, EquivalentToSingleRank) {
  auto world = comm::mpi_world();
  const int W = world->size();
  set_compute_threads(1);
  const auto ds = varied_documents(96, 3);
  const auto ref = run_single_rank(base_config(), ds);
  const std::vector<int> pps = W > 2 ? std::vector<int>{2, W} : std::vector<int>{W};
  for (int pp : pps) {
    if (W % pp != 0) continue;
    for (const std::string& schedule : parallel::schedule_names()) {
      const std::string layout = "dp=" + std::to_string(W / pp) + ",pp=" + std::to_string(pp) +
                                 ",schedule=" + schedule + (schedule == "interleaved" ? ",v=2" : "") +
                                 (W / pp > 1 ? ",zero=1" : "");
      SCOPED_TRACE(layout);
      auto cfg = train::with_layout(base_config(), train::parse_layout(layout));
      cfg.training.grad_accum = 4 / (W / pp);  // the same global window
      cfg.comm.backend = "mpi";
      comm::ParallelContext ctx = mpi_context(world, pp);
      train::Trainer t(cfg, ctx, ds, std::nullopt);
      for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
      const auto got = train::gather_model(t, false);
      if (pp == W)
        EXPECT_EQ(got, ref);
      else
        EXPECT_LT(max_abs_diff(got, ref), 1e-6);
    }
  }
}

// tp x pp across four processes, sequence parallelism on, against one
// rank: within 1e-4 of the largest value (tensor parallelism sums the
// row-parallel outputs and the vocabulary softmax in another order).
TEST(PipelineMpi, TensorTimesPipelineMatchesOneRank) {
  auto world = comm::mpi_world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 processes";
  set_compute_threads(1);
  const auto ds = varied_documents(96, 3);
  const auto ref = run_single_rank(base_config(), ds);
  auto cfg = train::with_layout(base_config(), train::parse_layout("tp=2,sp=on,pp=2,schedule=1f1b"));
  cfg.comm.backend = "mpi";
  comm::ParallelContext ctx = mpi_context(world, 2, 2);
  train::Trainer t(cfg, ctx, ds, std::nullopt);
  for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
  const auto got = train::gather_model(t, false);
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_LT(rel_to_max(got, ref), 1e-4);
}

// Activations of 8 KiB per micro-batch (d_model 128), above the eager limit
// of Open MPI's shared-memory transport (4 KiB by default; CMake lowers it to
// 256 bytes for every MPI trainer test): a send then completes only once its
// receive is posted, as it does across
// nodes, so an order of sends and receives that relied on buffering would
// hang here (a known deadlock elsewhere). Every schedule, pp = world, with
// the embedding tied to the head on another stage (its gradient summed
// over the two stages' tie group). Within 1e-5 of the largest value of
// one rank's (the tie group sums the embedding's two gradients in another
// order; AdamW's normalization carries that last bit into the update).
TEST(PipelineMpi, TransfersAboveTheEagerLimitInEveryScheduleWithATiedEmbedding) {
  auto world = comm::mpi_world();
  const int W = world->size();
  set_compute_threads(1);
  auto cfg = base_config();
  cfg.model.d_model = 128;
  cfg.model.n_heads = 4;
  cfg.model.head_dim = 32;
  cfg.model.n_kv_heads = 2;
  cfg.model.ffn_hidden = 256;
  cfg.model.tied_embeddings = true;
  cfg.validate();
  ASSERT_GT(cfg.training.micro_batch * cfg.data.seq_len * cfg.model.d_model * 4, 4096);
  const auto ds = varied_documents(96, 4);
  const auto ref = run_single_rank(cfg, ds);
  for (const std::string& schedule : parallel::schedule_names()) {
    const std::string layout = "pp=" + std::to_string(W) + ",schedule=" + schedule +
                               (schedule == "interleaved" || schedule == "zb-v" ? ",v=2" : "");
    SCOPED_TRACE(layout);
    auto run_cfg = train::with_layout(cfg, train::parse_layout(layout));
    run_cfg.comm.backend = "mpi";
    comm::ParallelContext ctx = mpi_context(world, W);
    train::Trainer t(run_cfg, ctx, ds, std::nullopt);
    for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
    const auto got = train::gather_model(t, false);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LT(rel_to_max(got, ref), 1e-5);
  }
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--fail-stage") == 0) return fail_mid_schedule();
  return run_mpi_tests(argc, argv);
}
