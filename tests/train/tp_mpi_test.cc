// Tensor parallelism composed with data parallelism on the MPI backend
// (one rank per process): every process computes the single-rank reference
// in-process (threads backend, one rank), then trains the layout across
// the MPI world and compares every step per tensor (gradients, update
// deltas, parameters; equivalence.h) for 3 AdamW steps under fp64
// (tolerance 1e-10) and f32 (1e-4, updates 0.1).
// Reproducible mode: bitwise (tolerance 0).
//   mpirun -np 4 --oversubscribe --allow-run-as-root train_tp_mpi_test
#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/threading.h"
#include "train/mpi_test_main.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

train::TrainConfig model_config() {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 1;  // one KV head shared by every tp rank
  cfg.model.head_dim = 4;
  cfg.model.ffn_hidden = 30;
  cfg.optimizer.lr = 1e-3;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  cfg.training.threads = 1;
  return cfg;
}

}  // namespace

TEST(TensorParallelMpi, EquivalentToSingleRank) {
  auto world = comm::mpi_world();
  const int W = world->size();
  const auto ds = varied_documents(96, 3);
  set_compute_threads(1);
  struct Case {
    int tp, zero;
    bool sp;
  };
  for (const Case c : {Case{2, 1, false}, Case{2, 3, true}, Case{W, 0, true}}) {
    if (W % c.tp != 0) continue;
    const int R = W / c.tp;
    SCOPED_TRACE(::testing::Message() << "world " << W << ": tp=" << c.tp << " dp=" << R << " zero=" << c.zero
                                      << " sp=" << c.sp);
    auto cfg = model_config();
    cfg.parallel.tp = c.tp;
    cfg.parallel.dp = R;
    cfg.parallel.zero_stage = c.zero;
    cfg.parallel.sequence_parallel = c.sp;
    const auto reports = expect_mpi_matches_one_rank(world, cfg, 3, ds, 1e-4,
                                                     [](const std::vector<train::StepRecord>& records) {
                                                       for (const auto& r : records) EXPECT_FALSE(r.metrics.skipped);
                                                     });
    EXPECT_GT(reports.back().steps.back().param.rel, 0.0) << "a different reduction order: not bitwise";
  }
}

// Reproducible mode's canonical blocks (docs/math.md (M.73)) make tp and
// sp bitwise against one rank across processes too: zero difference in f32,
// with whole KV heads per rank and with one KV head shared by the tp ranks
// (its query heads' parts gathered over them, (M.76)).
TEST(TensorParallelMpi, ReproducibleModeIsBitwiseOneRank) {
  auto world = comm::mpi_world();
  const int W = world->size();
  const auto ds = varied_documents(96, 3);
  set_compute_threads(1);
  for (const int kv : {4, 1}) {
    for (const int tp : {2, W}) {
      if (W % tp != 0) continue;
      SCOPED_TRACE(::testing::Message() << "world " << W << ": tp=" << tp << " sp dp=" << W / tp << " kv=" << kv);
      auto cfg = model_config();
      cfg.model.n_kv_heads = kv;
      cfg.model.head_dim = 8;  // one KV head's 8 features: the 8 canonical blocks
      cfg.model.ffn_hidden = 32;
      cfg.training.reproducible = true;
      cfg.parallel.tp = tp;
      cfg.parallel.dp = W / tp;
      cfg.parallel.sequence_parallel = true;
      const auto ref = single_rank_records(cfg, cfg.parallel.dp, ds, 3);
      comm::ParallelContext ctx = mpi_context(world, train::mesh_for(cfg, W));
      train::Trainer t(cfg, ctx, ds, std::nullopt);
      const auto r =
          train::compare_records(ref, train::record_steps(t, 3), train::global_tensors(cfg.model), "fp32", 0.0);
      EXPECT_TRUE(r.pass()) << r.str();
    }
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
