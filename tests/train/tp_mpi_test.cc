// Tensor parallelism composed with data parallelism on the MPI backend
// (one rank per process): every process computes the single-rank reference
// in-process (threads backend, one rank), then trains the layout across
// the MPI world and compares the whole parameters after 3 AdamW steps
// (f32, tolerance 1e-4 relative to the largest parameter).
//   mpirun -np 4 --oversubscribe --allow-run-as-root train_tp_mpi_test
#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/parallel/global_values.h"
#include "support/numeric.h"
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
    const auto ref = single_rank(cfg, R, ds);
    cfg.parallel.tp = c.tp;
    cfg.parallel.dp = R;
    cfg.parallel.zero_stage = c.zero;
    cfg.parallel.sequence_parallel = c.sp;
    comm::MeshShape shape;
    shape.tp = c.tp;
    shape.dp = R;
    comm::ParallelContext ctx = mpi_context(world, shape);
    train::Trainer t(cfg, ctx, ds, std::nullopt);
    for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
    const auto got = parallel::gather_global_values(t.engine(), ctx.group({"pp", "tp"}), false);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LT(rel_to_max(got, ref), 1e-4);
    EXPECT_GT(rel_to_max(got, ref), 0.0) << "a different reduction order: not bitwise";
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
