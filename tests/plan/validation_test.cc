// Covers src/meshtrain/train/meta_step.cc, comm/recording/ and the meta
// device (core/meta_memory.cc, kernels/meta/): the planner's recorded steps
// against what real steps do on this machine. For every layout the trainer
// runs, each rank's step recorded on the meta device is compared with that
// rank's MemoryTracker and the CommStats of every group it uses, over the
// second step of a run:
//   communication: calls and bytes per (group, op kind), exactly;
//   memory: every category's bytes at rest and peak during the step,
//   exactly. The recorded step is the trainer's own code, so a difference
//   means something in it reads values the meta device does not have. The
//   one exception is timing: under ZeRO 2/3 a unit's transient gradient is
//   freed when its overlapped reduce-scatter is found complete, which
//   depends on when the peers arrive, so the communication-buffer and total
//   peaks must lie in the bracket of reductions done at the first
//   completion test and reductions done only when waited for.
// MoE layouts run with model.moe_force_balance, the routing the planner
// assumes, so their expert buffers and all-to-alls compare exactly too.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "meshtrain/plan/prediction.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

struct Measured {
  MemorySnapshot at_rest, peak;
  std::map<std::pair<std::string, comm::OpKind>, comm::PlannedTotals> comm;
  comm::PlannedTotals tp_sums;  // the engine's sums of gradients partial over tp ranks (tp_grad_sums.h)
};

// The sub-groups of tp ranks sharing a KV head ("tp/shareN") belong to the
// engine's TpGradSums; its own stats check them, with its sums over tp.
bool engine_private_group(const std::string& g) { return g.rfind("tp/", 0) == 0; }

// Every group of the mesh and the world.
std::map<std::string, comm::CommStats> group_stats(comm::ParallelContext& ctx) {
  std::map<std::string, comm::CommStats> s;
  s["world"] = ctx.world->stats();
  for (comm::Axes axes : comm::Mesh::group_axes()) {
    const auto g = ctx.mesh.group_ptr(axes);
    s[g->name()] = g->stats();
  }
  return s;
}

int world_of(const train::TrainConfig& cfg) {
  return cfg.parallel.dp * cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.cp;
}

std::vector<Measured> measure(const train::TrainConfig& cfg) {
  std::vector<Measured> out(size_t(world_of(cfg)));
  std::mutex mu;
  with_trainers(cfg, varied_documents(128, 7), std::nullopt, [&](train::Trainer& t) {
    t.step();
    Measured m;
    auto& tracker = t.context().allocator->tracker();
    m.at_rest = tracker.snapshot();
    const auto before = group_stats(t.context());
    const auto metrics = t.step();
    EXPECT_FALSE(metrics.skipped) << "the prediction assumes the update is applied";
    m.peak = tracker.snapshot();
    const auto& sums = t.engine().tp_sum_stats();
    m.tp_sums = {sums.calls, sums.bytes};
    const auto after = group_stats(t.context());
    for (const auto& [g, s] : after)
      for (int k = 0; k < comm::kNumOpKinds; ++k) {
        const auto& a = s.ops[size_t(k)];
        const auto& b = before.at(g).ops[size_t(k)];
        if (a.calls == b.calls) continue;
        m.comm[{g, comm::OpKind(k)}] = {int64_t(a.calls - b.calls), int64_t(a.bytes - b.bytes)};
      }
    std::lock_guard<std::mutex> lock(mu);
    out[size_t(t.context().rank)] = m;
  });
  return out;
}

// A model big enough that every saved tensor shows in the byte counts
// (each a granule or more apart), small enough to run dozens of layouts.
train::TrainConfig config(int dp, int stage, const std::string& precision) {
  auto cfg = tiny_train_config();
  cfg.model.d_model = 64;
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.model.ffn_hidden = 96;
  cfg.model.max_seq_len = 32;
  cfg.data.seq_len = 32;
  cfg.data.mode = "packed";
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  cfg.training.precision = precision;
  cfg.parallel.dp = dp;
  cfg.parallel.zero_stage = stage;
  cfg.parallel.bucket_mb = 0.05;  // several buckets
  return cfg;
}

void gpt2_style(train::TrainConfig& cfg) {
  cfg.model.norm = model::NormKind::LayerNorm;
  cfg.model.positions = model::PositionKind::Learned;
  cfg.model.mlp = model::MlpKind::Gelu;
  cfg.model.tied_embeddings = true;
  cfg.model.bias = true;
  cfg.model.n_kv_heads = 4;
}

std::string name(MemCategory c) { return std::string(mem_category_name(c)); }

void expect_prediction_matches(const train::TrainConfig& cfg) {
  const plan::StepInputs in = train::step_inputs(cfg);
  const std::vector<Measured> measured = measure(cfg);
  for (int rank = 0; rank < world_of(cfg); ++rank) {
    SCOPED_TRACE(::testing::Message() << "rank " << rank);
    const Measured& m = measured[size_t(rank)];
    const plan::RankStep point = train::record_step(in, rank);
    const plan::RankStep early = train::record_step(in, rank, 1);
    const plan::RankStep late = train::record_step(in, rank, plan::kNeverCompletes);

    // Communication: every call of every group, exactly.
    const auto predicted = point.comm.by_group();
    comm::PlannedTotals tp_sums;
    for (const comm::PlannedOp& op : point.comm.ops())
      if (op.phase == comm::StepPhase::GradSync && (op.group == "tp" || engine_private_group(op.group))) {
        tp_sums.calls += 1;
        tp_sums.bytes += op.bytes;
      }
    EXPECT_EQ(m.tp_sums.calls, tp_sums.calls) << "gradient sums over tp ranks";
    EXPECT_EQ(m.tp_sums.bytes, tp_sums.bytes) << "gradient sums over tp ranks";
    for (const auto& [key, want] : predicted) {
      if (engine_private_group(key.first)) continue;
      auto it = m.comm.find(key);
      ASSERT_NE(it, m.comm.end()) << "predicted " << want.calls << " " << comm::op_kind_name(key.second)
                                  << " on group " << key.first << " but none ran";
      EXPECT_EQ(it->second.calls, want.calls) << key.first << " " << comm::op_kind_name(key.second);
      EXPECT_EQ(it->second.bytes, want.bytes) << key.first << " " << comm::op_kind_name(key.second);
    }
    for (const auto& [key, got] : m.comm)
      EXPECT_TRUE(predicted.count(key)) << got.calls << " " << comm::op_kind_name(key.second) << " on group "
                                        << key.first << " ran but were not predicted";

    // Memory: persistent state exactly, step peaks per category.
    for (int c = 0; c < kNumMemCategories; ++c) {
      const MemCategory cat = MemCategory(c);
      EXPECT_EQ(point.at_rest.current[size_t(c)], m.at_rest.current[size_t(c)]) << name(cat) << " at rest";
      const double got = double(m.peak.peak[size_t(c)]), want = double(point.peak.peak[size_t(c)]);
      const double lo = double(early.peak.peak[size_t(c)]), hi = double(late.peak.peak[size_t(c)]);
      if (lo == hi) {
        EXPECT_EQ(got, want) << name(cat) << " peak";
      } else {
        EXPECT_GE(got, lo) << name(cat) << " peak below the bracket";
        EXPECT_LE(got, hi) << name(cat) << " peak above the bracket";
      }
    }
    const double got = double(m.peak.total_peak);
    const double lo = double(early.peak.total_peak), hi = double(late.peak.total_peak);
    EXPECT_GE(got, lo) << "total peak";
    EXPECT_LE(got, hi) << "total peak";
    if (lo == hi) {
      EXPECT_EQ(got, double(point.peak.total_peak)) << "total peak";
    }
  }
}

// Model-parallel layouts on four blocks (two per pipeline stage).
void expect_layouts_match(const std::vector<const char*>& layouts) {
  for (const char* layout : layouts) {
    SCOPED_TRACE(layout);
    auto cfg = config(1, 0, "fp32");
    cfg.model.n_layers = 4;
    cfg = train::with_layout(cfg, train::parse_layout(layout));
    expect_prediction_matches(cfg);
  }
}

}  // namespace

TEST(PlanValidation, DataParallelEveryZeroStage) {
  for (int dp : {1, 2, 4})
    for (int stage : {0, 1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << "dp=" << dp << " zero=" << stage);
      expect_prediction_matches(config(dp, stage, "fp32"));
    }
}

// One micro-batch per window: under ZeRO 2/3 the transient gradients of the
// units live only while their reductions are in flight (the bracket).
TEST(PlanValidation, SingleMicroBatchAndNoOverlap) {
  for (int stage : {0, 1, 2, 3})
    for (bool overlap : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "zero=" << stage << " overlap=" << overlap);
      auto cfg = config(2, stage, "fp32");
      cfg.training.grad_accum = 1;
      cfg.parallel.overlap = overlap;
      expect_prediction_matches(cfg);
    }
}

TEST(PlanValidation, MixedPrecisionAndNarrowReduction) {
  for (const char* precision : {"bf16", "fp16"})
    for (const char* reduce : {"fp32", "bf16"})
      for (int stage : {0, 1, 2, 3}) {
        if (std::string(precision) == "fp16" && std::string(reduce) == "bf16") continue;
        SCOPED_TRACE(::testing::Message() << precision << " reduce " << reduce << " zero=" << stage);
        auto cfg = config(2, stage, precision);
        cfg.training.grad_reduce_dtype = reduce;
        cfg.training.loss_scale.initial = 256;  // no overflow skip in the measured step
        expect_prediction_matches(cfg);
      }
}

TEST(PlanValidation, RecomputationReshardingAndGpt2Style) {
  for (bool recompute : {false, true})
    for (bool gpt2 : {false, true})
      for (int stage : {0, 3}) {
        SCOPED_TRACE(::testing::Message() << "recompute=" << recompute << " gpt2=" << gpt2 << " zero=" << stage);
        auto cfg = config(2, stage, gpt2 ? "bf16" : "fp32");
        cfg.training.recompute = recompute;
        if (gpt2) gpt2_style(cfg);
        expect_prediction_matches(cfg);
      }
  auto keep = config(2, 3, "fp32");
  keep.parallel.reshard_after_forward = false;
  expect_prediction_matches(keep);
}

// The head in row chunks: the logits are a chunk's workspace in B instead
// of activations kept from F; under tp its loss's collectives run per chunk.
TEST(PlanValidation, TheHeadInRowChunks) {
  for (const char* layout : {"dp=2,zero=0", "dp=2,zero=3", "tp=2", "pp=2,schedule=zb-h1"}) {
    SCOPED_TRACE(layout);
    auto cfg = config(1, 0, "fp32");
    cfg.model.n_layers = 4;
    cfg.training.head_chunk_rows = 24;
    expect_prediction_matches(train::with_layout(cfg, train::parse_layout(layout)));
  }
}

// Reproducible mode: a leaf per micro-batch summed in a fixed tree, the
// tree's point-to-point exchanges over dp, the roots kept until the next
// window.
TEST(PlanValidation, ReproducibleTreeReduction) {
  for (int dp : {1, 2, 4})
    for (int stage : {0, 1, 3}) {
      SCOPED_TRACE(::testing::Message() << "reproducible dp=" << dp << " zero=" << stage);
      auto cfg = config(dp, stage, "fp32");
      cfg.training.reproducible = true;
      expect_prediction_matches(cfg);
    }
}

// Tensor and pipeline parallelism (every schedule), alone and with dp and
// ZeRO: the tensor-parallel all-reduces (blocks, vocabulary-parallel
// embedding and cross-entropy, head), receives posted ahead, the norm's and
// the timeline's gathers over the model-parallel ranks; at tp = 4 two ranks
// share each KV head and sum its partial gradients.
TEST(PlanValidation, TensorAndPipelineLayouts) {
  expect_layouts_match({"tp=2", "tp=4", "pp=2,schedule=gpipe", "pp=2,schedule=1f1b", "pp=2,schedule=zb-h1",
                        "pp=2,schedule=interleaved,v=2", "dp=2,tp=2,zero=1", "dp=2,pp=2,zero=3",
                        "tp=2,pp=2,schedule=1f1b"});
}

// Sequence parallelism: the stream, the norms and the residual adds on
// n / tp rows per rank; the normed rows all-gathered before the
// column-parallel layers and the row-parallel outputs reduce-scattered
// (their gradients the other way round), stages exchanging their rows only,
// and the norm weights' partial gradients summed over tp before the
// data-parallel reduction. Mixed precision gathers 16-bit operands;
// recomputation replays the gathers; the zero-bubble schedule keeps the
// gathered output gradients for its deferred weight jobs.
TEST(PlanValidation, SequenceParallelLayouts) {
  expect_layouts_match({"tp=2,sp=on", "dp=2,tp=2,sp=on,zero=1", "tp=2,sp=on,pp=2,schedule=1f1b",
                        "tp=2,sp=on,pp=2,schedule=zb-h1", "dp=2,tp=2,sp=on,zero=3", "tp=4,sp=on"});
  for (bool recompute : {false, true})
    for (bool gpt2 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tp=2,sp=on recompute=" << recompute << " gpt2=" << gpt2);
      auto cfg = config(1, 0, gpt2 ? "bf16" : "fp32");
      cfg.training.recompute = recompute;
      if (gpt2) gpt2_style(cfg);
      cfg = train::with_layout(cfg, train::parse_layout("tp=2,sp=on"));
      expect_prediction_matches(cfg);
    }
  // Deferred weight jobs of the row-parallel biases keep a copy of the
  // stream's gradient, beside the gathered output gradient under SP.
  for (const char* layout : {"pp=2,schedule=zb-h1", "tp=2,sp=on,pp=2,schedule=zb-h1"}) {
    SCOPED_TRACE(::testing::Message() << layout << " gpt2 untied");
    auto cfg = config(1, 0, "bf16");
    cfg.model.n_layers = 4;
    gpt2_style(cfg);
    cfg.model.tied_embeddings = false;  // the head and the embedding on different stages
    cfg = train::with_layout(cfg, train::parse_layout(layout));
    expect_prediction_matches(cfg);
  }
}

// Context parallelism: the ring's K/V blocks and their gradient sums, the
// softmax states and double buffers, the data group dp x cp of the engine.
TEST(PlanValidation, ContextParallelLayouts) {
  for (const char* layout : {"cp=2", "dp=2,cp=2", "cp=2,zero=3,dp=2", "cp=2,tp=2", "cp=2,pp=2", "cp=4"}) {
    SCOPED_TRACE(layout);
    auto cfg = config(1, 0, "fp32");
    cfg.model.n_layers = 4;
    cfg = train::with_layout(cfg, train::parse_layout(layout));
    expect_prediction_matches(cfg);
  }
  auto bf16 = train::with_layout(config(1, 0, "bf16"), train::parse_layout("cp=2,dp=2,zero=1"));
  bf16.training.loss_scale.initial = 256;
  expect_prediction_matches(bf16);
}

// Mixture of experts under the planner's balanced routing: the router, the
// expert-major buffers, the exchange of block sizes and blocks over ep, the
// experts' units reduced over edp, with and without ZeRO, capacity and a
// shared expert.
TEST(PlanValidation, ExpertParallelLayouts) {
  for (const char* layout : {"dp=2", "dp=2,ep=2", "dp=2,ep=2,zero=1", "dp=4,ep=2,zero=3", "dp=2,ep=2,pp=2"}) {
    for (double capacity : {0.0, 1.25}) {
      SCOPED_TRACE(::testing::Message() << layout << " capacity " << capacity);
      auto cfg = config(1, 0, "fp32");
      cfg.model.n_layers = 4;
      cfg.model.n_experts = 4;
      cfg.model.experts_top_k = 2;
      cfg.model.moe_capacity_factor = capacity;
      cfg.model.moe_shared_expert = capacity > 0;
      cfg.model.moe_force_balance = true;
      cfg = train::with_layout(cfg, train::parse_layout(layout));
      expect_prediction_matches(cfg);
    }
  }
}

// The planner states what it assumes beyond the layout.
TEST(PlanValidation, MoeRoutingIsStatedAsAnAssumption) {
  auto cfg = config(1, 0, "fp32");
  EXPECT_TRUE(plan::assumptions(train::step_inputs(cfg)).empty());
  cfg.model.n_experts = 4;
  cfg.model.experts_top_k = 2;
  const auto a = plan::assumptions(train::step_inputs(cfg));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_NE(a[0].find("balanced routing"), std::string::npos);
}
