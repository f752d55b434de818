// The step metrics report what tensor parallelism moved: per block the
// ring bytes of the formula (G micro-batches of B x S tokens per step),
// the partial gradients summed over tp ranks, in the JSON record too.
#include <gtest/gtest.h>

#include "meshtrain/core/threading.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

TEST(TensorParallelMetrics, StepReportsBytesPerLayerAndGradientSums) {
  auto cfg = tiny_train_config();
  cfg.data.mode = "packed";  // every micro-batch B x seq_len tokens
  cfg.model.n_heads = 2;
  cfg.model.n_kv_heads = 2;
  cfg.training.grad_accum = 2;
  const auto ds = varied_documents(64, 9);
  const int t = 2;
  const int64_t d = cfg.model.d_model, L = cfg.model.n_layers;
  const int64_t tokens = cfg.training.grad_accum * cfg.training.micro_batch * cfg.data.seq_len;
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sp" : "no sp");
    cfg.parallel.tp = t;
    cfg.parallel.sequence_parallel = sp;
    comm::LaunchOptions o;
    o.mesh.tp = t;
    o.world_size = t;
    comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
      set_compute_threads(1);
      train::Trainer tr(cfg, ctx, ds, std::nullopt);
      const train::StepMetrics m = tr.step();
      using C = model::TpCollective;
      const int64_t per_layer = m.tp.layer_ring_bytes[size_t(C::AllReduce)] +
                                m.tp.layer_ring_bytes[size_t(C::AllGather)] +
                                m.tp.layer_ring_bytes[size_t(C::ReduceScatter)];
      EXPECT_EQ(per_layer, 8 * (t - 1) * tokens * d * 4 / t);
      EXPECT_EQ(m.tp.layer_message_bytes[size_t(sp ? C::AllGather : C::AllReduce)], 4 * tokens * d * 4);
      // Under SP the norm weights' partial gradients are summed over tp:
      // two per block and the final norm, d floats each (RoPE, no biases).
      EXPECT_EQ(m.tp.grad_sum_bytes, sp ? (2 * L + 1) * d * 4 : 0);
      const auto j = m.to_json();
      ASSERT_TRUE(j.contains("tp_comm")) << j.dump();
      EXPECT_EQ(j["tp_comm"]["grad_sum_bytes"], m.tp.grad_sum_bytes);
      EXPECT_GT(j["tp_comm"]["ring_bytes"]["all_reduce"].get<int64_t>(), 0) << "the loss's max and sums at least";
    });
  }
}
