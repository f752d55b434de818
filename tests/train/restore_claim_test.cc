// Covers src/meshtrain/train/restore_claim.cc and layout_facts.cc: the claim a
// resume makes is a function of the saved and the live layout's facts alone
// (docs/math.md, "Rule: restore claims"), no trainer needed; the last test
// checks that a trainer's checkpoint records its plan's facts.
#include "meshtrain/train/restore_claim.h"

#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/core/error.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/train_config.h"
#include "meshtrain/train/training_step.h"
#include "train/train_fixtures.h"

namespace meshtrain::train {
namespace {

// dp 2 x G 2 x 4 rows: a 16-row window, threads, no kernels recorded.
LayoutFacts base() {
  LayoutFacts f;
  f.dp = 2;
  f.grad_accum = 2;
  f.micro_batch = 4;
  return f;
}

LayoutFacts reproducible(LayoutFacts f) {
  f.reproducible = true;
  return f;
}

// The same window split dp 4 x G 1.
LayoutFacts other_split(LayoutFacts f) {
  f.dp *= 2;
  f.grad_accum /= 2;
  return f;
}

ClaimKind kind(const LayoutFacts& saved, const LayoutFacts& now) { return restore_claim(saved, now).kind; }

const char* kSameReduction =
    "bitwise replay: same data-parallel degree and accumulation (ZeRO stage, pipeline stage and schedule changes "
    "alone are bitwise)";
const char* kReproducible =
    "bitwise replay: reproducible mode, same global window and micro-batch (dp x G splits, ep and ZeRO stages are "
    "bitwise)";
const char* kReductionOrder = "numerically close: same samples and objective per update; the reduction order changed";

TEST(RestoreClaim, SameFactsReplayBitwise) {
  EXPECT_EQ(restore_claim(base(), base()).text, kSameReduction);
  EXPECT_EQ(restore_claim(base(), base()).kind, ClaimKind::BitwiseReplay);
  // A pipeline split alone keeps the order when no tied weight spans stages.
  LayoutFacts pp4 = base();
  pp4.pp = 4;
  EXPECT_EQ(restore_claim(base(), pp4).text, kSameReduction);
}

TEST(RestoreClaim, AnotherWindowIsAssetsCompleteOnly) {
  LayoutFacts wider = base();
  wider.dp = 4;  // 32 rows
  EXPECT_EQ(restore_claim(base(), wider).text,
            "assets complete: the global batch changed (16 -> 32 rows per update), so the optimization trajectory "
            "differs");
  EXPECT_EQ(kind(wider, base()), ClaimKind::AssetsComplete);
  // Even in reproducible mode on both sides, and before any kernel change.
  LayoutFacts other_kernels = reproducible(wider);
  other_kernels.kernels = {{"isa", "avx2"}, {"cpu", "B"}, {"gemm", "g"}, {"threads", 1}};
  EXPECT_EQ(kind(reproducible(base()), other_kernels), ClaimKind::AssetsComplete);
}

TEST(RestoreClaim, KernelChangeIsNumericallyCloseAndNamed) {
  LayoutFacts saved = base(), now = base();
  saved.kernels = {{"isa", "avx2"}, {"cpu", "A"}, {"gemm", "packed 12x32 kc 512 + oneDNN 2.6.3"},
                   {"f32_gemm", "packed"}, {"threads", 4}};
  now.kernels = saved.kernels;
  EXPECT_EQ(kind(saved, now), ClaimKind::BitwiseReplay);
  now.kernels["cpu"] = "B";
  EXPECT_EQ(restore_claim(saved, now).text,
            "numerically close: same samples and objective per update; the kernels' arithmetic changed (CPU A -> B)");
  // Before reproducible mode's rule: other kernels round differently anyway.
  EXPECT_EQ(kind(reproducible(saved), reproducible(now)), ClaimKind::NumericallyClose);
  // A checkpoint that predates the record compares nothing.
  saved.kernels = nullptr;
  EXPECT_EQ(kind(saved, now), ClaimKind::BitwiseReplay);
}

TEST(RestoreClaim, ThreadCountCountsOnlyForOnednnBelowAvx512) {
  LayoutFacts saved = base(), now = base();
  saved.kernels = {{"isa", "avx2"}, {"cpu", "A"}, {"gemm", "oneDNN 2.6.3"}, {"f32_gemm", "onednn"}, {"threads", 4}};
  now.kernels = saved.kernels;
  now.kernels["threads"] = 2;
  EXPECT_NE(restore_claim(saved, now).text.find("compute threads 4 -> 2 below AVX-512"), std::string::npos);
  saved.kernels["isa"] = now.kernels["isa"] = "avx512";
  EXPECT_EQ(kind(saved, now), ClaimKind::BitwiseReplay);
  saved.kernels["isa"] = now.kernels["isa"] = "avx2";
  saved.kernels["gemm"] = now.kernels["gemm"] = "packed 6x16 kc 256 + oneDNN 2.6.3";
  saved.kernels["f32_gemm"] = now.kernels["f32_gemm"] = "packed";
  EXPECT_EQ(kind(saved, now), ClaimKind::BitwiseReplay);
}

// Each fact that orders a sum, changed alone at the same window: another
// reduction order.
TEST(RestoreClaim, EachReductionFactChangesTheOrder) {
  const std::vector<std::pair<const char*, std::function<void(LayoutFacts&)>>> changes = {
      {"dp x G split", [](LayoutFacts& f) { f = other_split(f); }},
      {"micro-batch split", [](LayoutFacts& f) { f.micro_batch /= 2, f.grad_accum *= 2; }},
      {"tp", [](LayoutFacts& f) { f.tp = 2; }},
      {"cp", [](LayoutFacts& f) { f.cp = 2; }},
      {"ep", [](LayoutFacts& f) { f.ep = 2; }},
      {"sequence parallelism", [](LayoutFacts& f) { f.sequence_parallel = true; }},
      {"backend", [](LayoutFacts& f) { f.backend = "mpi"; }},
      {"tied copies on two stages", [](LayoutFacts& f) { f.tie_sums_two_stages = true; }},
      {"the LM head in row chunks", [](LayoutFacts& f) { f.head_chunk_rows = 100; }},
  };
  for (const auto& [what, change] : changes) {
    LayoutFacts changed = base();
    change(changed);
    ASSERT_EQ(changed.window_rows(), base().window_rows()) << what;
    EXPECT_EQ(restore_claim(base(), changed).text, kReductionOrder) << what;
    EXPECT_EQ(restore_claim(changed, base()).text, kReductionOrder) << what << " (reversed)";
  }
}

// Reproducible mode on both sides: the sums follow the global window, so
// dp x G splits, ep and the backend keep the bits; the dense axes and the
// micro-batch do not.
TEST(RestoreClaim, ReproducibleModeReplaysSplitsOfTheSameWindow) {
  const LayoutFacts saved = reproducible(base());
  EXPECT_EQ(restore_claim(saved, reproducible(other_split(base()))).text, kReproducible);
  LayoutFacts ep = saved;
  ep.ep = 2;
  EXPECT_EQ(restore_claim(saved, ep).text, kReproducible);
  LayoutFacts mpi = saved;
  mpi.backend = "mpi";
  EXPECT_EQ(restore_claim(saved, mpi).text, kReproducible);
  // Only one side reproducible: the plain rule.
  EXPECT_EQ(restore_claim(saved, other_split(base())).text, kReductionOrder);
  EXPECT_EQ(restore_claim(base(), reproducible(other_split(base()))).text, kReductionOrder);
  // Another micro-batch, tp, cp, sequence parallelism or tie: another order.
  LayoutFacts mb = saved;
  mb.micro_batch = 2, mb.grad_accum = 4;
  EXPECT_EQ(restore_claim(saved, mb).text, kReductionOrder);
  for (auto change : {+[](LayoutFacts& f) { f.tp = 2; }, +[](LayoutFacts& f) { f.cp = 2; },
                      +[](LayoutFacts& f) { f.sequence_parallel = true; },
                      +[](LayoutFacts& f) { f.tie_sums_two_stages = true; }}) {
    LayoutFacts changed = saved;
    change(changed);
    EXPECT_EQ(restore_claim(saved, changed).text, kReductionOrder);
  }
}

// With the same canonical blocks on both sides (docs/math.md (M.73),
// (M.74)) the sums follow the model too: tp, sequence parallelism, cp and
// the tied table's stages keep the bits; another block count or a side
// without them (an old checkpoint, shared KV heads) does not.
TEST(RestoreClaim, CanonicalBlocksReplayTensorAndContextParallelChanges) {
  const char* kCanonical =
      "bitwise replay: reproducible mode with 8 canonical blocks, same global window and micro-batch (dp x G "
      "splits, ZeRO, tp, sp, cp, pipeline stages and ep are bitwise)";
  LayoutFacts saved = reproducible(base());
  saved.canonical_blocks = 8;
  for (auto change : {+[](LayoutFacts& f) { f.tp = 2; }, +[](LayoutFacts& f) { f.tp = 4, f.sequence_parallel = true; },
                      +[](LayoutFacts& f) { f.tie_sums_two_stages = true, f.pp = 2; },
                      +[](LayoutFacts& f) { f = other_split(f), f.backend = "mpi"; },
                      +[](LayoutFacts& f) { f.cp = 2; }, +[](LayoutFacts& f) { f = other_split(f), f.cp = 4; },
                      +[](LayoutFacts& f) { f.cp = 2, f.tp = 2, f.sequence_parallel = true; }}) {
    LayoutFacts changed = saved;
    change(changed);
    EXPECT_EQ(restore_claim(saved, changed).text, kCanonical);
    EXPECT_EQ(restore_claim(changed, saved).text, kCanonical);
  }
  LayoutFacts four = saved;
  four.canonical_blocks = 4, four.tp = 2;
  EXPECT_EQ(restore_claim(saved, four).text, kReductionOrder);
  LayoutFacts none = saved;
  none.canonical_blocks = 0, none.tp = 2;
  EXPECT_EQ(restore_claim(saved, none).text, kReductionOrder);
}

// Without canonical blocks (a checkpoint written before them) the tree's
// leaves under context parallelism are (replica, cp rank, micro-batch):
// another dp x G split orders them differently even in reproducible mode;
// the same split replays.
TEST(RestoreClaim, ReproducibleModeUnderContextParallelismNeedsTheSameSplit) {
  LayoutFacts saved = reproducible(base());
  saved.cp = 2;
  EXPECT_EQ(restore_claim(saved, other_split(saved)).text, kReductionOrder);
  EXPECT_EQ(restore_claim(other_split(saved), saved).text, kReductionOrder);
  EXPECT_EQ(restore_claim(saved, saved).text, kReproducible);
  LayoutFacts mpi = saved;
  mpi.backend = "mpi";  // another backend is another reduction under cp
  EXPECT_EQ(restore_claim(saved, mpi).text, kReductionOrder);
}

// The claim's kind does not depend on which side saved (only the texts name
// a direction: "16 -> 32").
TEST(RestoreClaim, KindIsSymmetric) {
  std::vector<LayoutFacts> layouts;
  for (int blocks : {0, 8})
    for (bool repro : {false, true})
      for (int cp : {1, 2})
        for (int ep : {1, 2})
          for (bool split : {false, true})
            for (bool tie : {false, true})
              for (const char* backend : {"threads", "mpi"}) {
                LayoutFacts f = base();
                f.reproducible = repro, f.cp = cp, f.ep = ep, f.tie_sums_two_stages = tie, f.backend = backend;
                f.canonical_blocks = blocks, f.tp = blocks ? 2 : 1;
                layouts.push_back(split ? other_split(f) : f);
              }
  LayoutFacts wider = base();
  wider.dp = 8;
  layouts.push_back(wider);
  for (size_t a = 0; a < layouts.size(); ++a)
    for (size_t b = 0; b < layouts.size(); ++b)
      ASSERT_EQ(kind(layouts[a], layouts[b]), kind(layouts[b], layouts[a])) << a << " vs " << b;
}

// ---- the facts a checkpoint's metadata records ----

nlohmann::json model_record(bool tied) {
  model::ModelConfig m;
  m.tied_embeddings = tied;
  return checkpoint::model_config_to_json(m);
}

TEST(LayoutFacts, OldMetadataTakesTheDefaults) {
  const nlohmann::json meta = {{"layout", {{"dp", 2}, {"grad_accum", 3}, {"micro_batch", 4}, {"zero_stage", 1}}},
                               {checkpoint::kMetaModelConfig, model_record(true)}};
  const LayoutFacts f = LayoutFacts::from_metadata(meta);
  EXPECT_EQ(f.dp, 2);
  EXPECT_EQ(f.grad_accum, 3);
  EXPECT_EQ(f.micro_batch, 4);
  EXPECT_EQ(f.window_rows(), 24);
  EXPECT_EQ(f.tp, 1);
  EXPECT_EQ(f.cp, 1);
  EXPECT_EQ(f.ep, 1);
  EXPECT_EQ(f.pp, 1);
  EXPECT_FALSE(f.sequence_parallel);
  EXPECT_EQ(f.backend, "threads");
  EXPECT_FALSE(f.reproducible);
  EXPECT_FALSE(f.tie_sums_two_stages) << "one stage holds both copies";
  EXPECT_EQ(f.head_chunk_rows, 0);
  EXPECT_TRUE(f.kernels.is_null());
  // Such a checkpoint resumes bitwise on the same split of today's layout.
  LayoutFacts now = base();
  now.grad_accum = 3;
  EXPECT_EQ(kind(f, now), ClaimKind::BitwiseReplay);
}

TEST(LayoutFacts, MetadataWithoutTheWindowIsACheckpointError) {
  EXPECT_THROW(LayoutFacts::from_metadata({{"step", 3}}), CheckpointError);
  try {
    LayoutFacts::from_metadata({{"layout", {{"dp", 2}, {"micro_batch", 4}}}});
    FAIL() << "no grad_accum";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'grad_accum'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LayoutFacts::from_metadata({{"layout", {{"dp", "two"}, {"grad_accum", 1}, {"micro_batch", 4}}}}),
               CheckpointError);
}

// Without the tie record: tied and pp > 1 on the loop placement (every
// schedule but zb-v) puts the copies on two stages.
TEST(LayoutFacts, OldMetadataTieFollowsTheSchedulesPlacement) {
  auto tie = [](bool tied, int pp, const char* schedule) {
    nlohmann::json layout = {{"dp", 1}, {"grad_accum", 1}, {"micro_batch", 1}, {"pp", pp}, {"schedule", schedule}};
    return LayoutFacts::from_metadata({{"layout", layout}, {checkpoint::kMetaModelConfig, model_record(tied)}})
        .tie_sums_two_stages;
  };
  EXPECT_TRUE(tie(true, 2, "1f1b"));
  EXPECT_TRUE(tie(true, 4, "interleaved"));
  EXPECT_FALSE(tie(true, 2, "zb-v")) << "V placement: embedding and head on stage 0";
  EXPECT_FALSE(tie(true, 1, "1f1b"));
  EXPECT_FALSE(tie(false, 2, "1f1b")) << "untied";
  // No schedule recorded: 1f1b.
  EXPECT_TRUE(LayoutFacts::from_metadata({{"layout", {{"dp", 1}, {"grad_accum", 1}, {"micro_batch", 1}, {"pp", 2}}},
                                          {checkpoint::kMetaModelConfig, model_record(true)}})
                  .tie_sums_two_stages);
  // A recorded tie wins over the rule.
  EXPECT_FALSE(LayoutFacts::from_metadata(
                   {{"layout",
                     {{"dp", 1}, {"grad_accum", 1}, {"micro_batch", 1}, {"pp", 2}, {"tie_sums_two_stages", false}}},
                    {checkpoint::kMetaModelConfig, model_record(true)}})
                   .tie_sums_two_stages);
}

TrainConfig pipeline_config(bool tied, int pp, const std::string& schedule) {
  TrainConfig c = testing::tiny_train_config();
  c.model.n_layers = 4;  // two chunks of two stages (interleaved, zb-v)
  c.model.tied_embeddings = tied;
  c.parallel.pp = pp;
  c.parallel.schedule = schedule;
  if (schedule == "interleaved" || schedule == "zb-v") c.parallel.virtual_stages = 2;
  return c;
}

LayoutFacts live_facts(const TrainConfig& c) {
  comm::MeshShape mesh;
  mesh.pp = c.parallel.pp;
  const parallel::LayoutPlan plan(c.model, mesh, 0, layout_options(c));
  return LayoutFacts::from_layout(c, plan);
}

// The live tie comes from the plan's placement; it agrees with what an old
// checkpoint's rule derives, and a new checkpoint records it.
TEST(LayoutFacts, LiveTieComesFromThePlanAndRoundTrips) {
  for (bool tied : {false, true})
    for (int pp : {1, 2})
      for (const std::string& schedule : parallel::schedule_names()) {
        if (pp == 1 && schedule != "1f1b") continue;
        SCOPED_TRACE((tied ? "tied pp=" : "untied pp=") + std::to_string(pp) + " " + schedule);
        const TrainConfig c = pipeline_config(tied, pp, schedule);
        const LayoutFacts live = live_facts(c);
        EXPECT_EQ(live.tie_sums_two_stages, tied && pp > 1 && schedule != "zb-v");
        EXPECT_EQ(live.pp, pp);
        EXPECT_EQ(live.window_rows(), 4);
        EXPECT_TRUE(live.kernels.is_object());

        nlohmann::json layout = live.layout_json();
        const nlohmann::json meta = {{"layout", layout}, {"kernels", live.kernels},
                                     {checkpoint::kMetaModelConfig, checkpoint::model_config_to_json(c.model)}};
        const LayoutFacts saved = LayoutFacts::from_metadata(meta);
        EXPECT_EQ(saved.tie_sums_two_stages, live.tie_sums_two_stages);
        EXPECT_EQ(restore_claim(saved, live).text, kSameReduction);

        layout.erase("tie_sums_two_stages");  // as a checkpoint from before the record
        layout["schedule"] = schedule;
        nlohmann::json old = meta;
        old["layout"] = layout;
        EXPECT_EQ(LayoutFacts::from_metadata(old).tie_sums_two_stages, live.tie_sums_two_stages);
      }
}

// A tied model saved at pp = 2 under 1f1b continues bitwise under gpipe (the
// copies stay on two stages), only numerically close under zb-v or at pp = 1
// (one stage holds both); an untied one continues bitwise on all three.
TEST(LayoutFacts, TiedPipelineChangesClaimByPlacement) {
  const LayoutFacts saved = live_facts(pipeline_config(true, 2, "1f1b"));
  EXPECT_EQ(kind(saved, live_facts(pipeline_config(true, 2, "gpipe"))), ClaimKind::BitwiseReplay);
  EXPECT_EQ(kind(saved, live_facts(pipeline_config(true, 2, "zb-v"))), ClaimKind::NumericallyClose);
  EXPECT_EQ(kind(saved, live_facts(pipeline_config(true, 1, "1f1b"))), ClaimKind::NumericallyClose);
  const LayoutFacts untied = live_facts(pipeline_config(false, 2, "1f1b"));
  EXPECT_EQ(kind(untied, live_facts(pipeline_config(false, 2, "zb-v"))), ClaimKind::BitwiseReplay);
  EXPECT_EQ(kind(untied, live_facts(pipeline_config(false, 1, "1f1b"))), ClaimKind::BitwiseReplay);
}

// What a trainer writes: the facts of its own plan, so a checkpoint carries
// the tie instead of a later reader deriving it from the schedule's name.
TEST(LayoutFacts, ACheckpointRecordsItsPlansFacts) {
  const auto ds = testing::varied_documents(16, 3);
  for (const char* layout : {"pp=2,schedule=1f1b", "pp=2,schedule=zb-v"}) {
    SCOPED_TRACE(layout);
    TrainConfig c = testing::tiny_train_config();
    c.model.n_layers = 4;
    c.model.tied_embeddings = true;
    c = with_layout(c, parse_layout(layout));
    std::mutex mu;
    std::vector<nlohmann::json> recorded;
    testing::with_trainers(c, ds, std::nullopt, [&](Trainer& t) {
      const nlohmann::json meta = t.save_request().metadata;
      const LayoutFacts saved = LayoutFacts::from_metadata(meta), live = LayoutFacts::from_layout(t.config(), t.layout());
      std::lock_guard<std::mutex> lock(mu);
      recorded.push_back(meta.at("layout"));
      EXPECT_EQ(saved.layout_json(), live.layout_json());
      EXPECT_EQ(restore_claim(saved, live).text, kSameReduction);
    });
    ASSERT_EQ(recorded.size(), 2u);
    for (const nlohmann::json& l : recorded)
      EXPECT_EQ(l.at("tie_sums_two_stages"), std::string(layout).find("zb-v") == std::string::npos);
  }
}

// A run with the LM head in row chunks records them: resuming with other
// chunks sums the head's weight gradient in another order.
TEST(LayoutFacts, ACheckpointRecordsTheHeadsRowChunks) {
  const auto ds = testing::varied_documents(16, 3);
  TrainConfig c = testing::tiny_train_config();
  c.training.head_chunk_rows = 24;
  c.validate();
  testing::with_trainers(c, ds, std::nullopt, [&](Trainer& t) {
    const nlohmann::json meta = t.save_request().metadata;
    EXPECT_EQ(meta.at("layout").at("head_chunk_rows"), 24);
    const LayoutFacts saved = LayoutFacts::from_metadata(meta);
    LayoutFacts live = LayoutFacts::from_layout(t.config(), t.layout());
    EXPECT_EQ(restore_claim(saved, live).text, kSameReduction);
    live.head_chunk_rows = 0;
    EXPECT_EQ(restore_claim(saved, live).text, kReductionOrder);
  });
}

}  // namespace
}  // namespace meshtrain::train
