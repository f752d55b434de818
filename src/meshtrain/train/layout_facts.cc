#include "meshtrain/train/layout_facts.h"

#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/core/error.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/kernel_environment.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {
namespace {

const char* kTieKey = "tie_sums_two_stages";

// A checkpoint without the tie record: with pp > 1 stages, the loop
// placement puts the last chunk (the head) on stage pp - 1 and the
// embedding on stage 0; the V placement puts both on stage 0
// (parallel/layout_plan.h, ChunkPlacement). A checkpoint without a model
// record counts as tied: the weaker claim.
bool recorded_tie_rule(const nlohmann::json& meta, const nlohmann::json& layout) {
  const bool tied = !meta.contains(checkpoint::kMetaModelConfig) ||
                    checkpoint::model_config_from_json(meta.at(checkpoint::kMetaModelConfig)).tied_embeddings;
  return tied && layout.value("pp", 1) > 1 &&
         parallel::placement_of(layout.value("schedule", std::string("1f1b"))) == parallel::ChunkPlacement::Loop;
}

}  // namespace

LayoutFacts LayoutFacts::from_metadata(const nlohmann::json& meta) {
  MT_REQUIRE(CheckpointError, meta.contains("layout") && meta.at("layout").is_object(),
             "checkpoint metadata has no 'layout' record: it cannot say which restore claim holds");
  const nlohmann::json& l = meta.at("layout");
  for (const char* key : {"dp", "grad_accum", "micro_batch"})
    MT_REQUIRE(CheckpointError, l.contains(key), "checkpoint metadata.layout has no '", key, "'");
  try {
    LayoutFacts f;
    f.dp = l.at("dp").get<int64_t>();
    f.grad_accum = l.at("grad_accum").get<int64_t>();
    f.micro_batch = l.at("micro_batch").get<int64_t>();
    f.replica_grad_accum = l.value("replica_grad_accum", std::vector<int64_t>{});
    // Layouts from before placements recorded no cp; tp and pp were 1.
    f.tp = l.value("tp", 1);
    f.cp = l.value("cp", 1);
    f.ep = l.value("ep", 1);
    f.pp = l.value("pp", 1);
    f.sequence_parallel = l.value("sequence_parallel", false);
    f.backend = l.value("backend", std::string("threads"));
    f.reproducible = l.value("reproducible", false);
    f.canonical_blocks = l.value("canonical_blocks", 0);
    f.tie_sums_two_stages = l.contains(kTieKey) ? l.at(kTieKey).get<bool>() : recorded_tie_rule(meta, l);
    f.head_chunk_rows = l.value("head_chunk_rows", int64_t(0));
    f.kernels = meta.value("kernels", nlohmann::json());
    return f;
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(CheckpointError, "checkpoint metadata.layout is invalid: ", e.what());
  }
}

LayoutFacts LayoutFacts::from_layout(const TrainConfig& cfg, const parallel::LayoutPlan& plan) {
  const comm::MeshShape& mesh = plan.mesh();
  LayoutFacts f;
  f.dp = mesh.dp;
  f.grad_accum = cfg.training.grad_accum;
  f.replica_grad_accum = cfg.parallel.replica_grad_accum;
  f.micro_batch = cfg.training.micro_batch;
  f.tp = mesh.tp;
  f.cp = mesh.cp;
  f.ep = mesh.ep;
  f.pp = mesh.pp;
  f.sequence_parallel = cfg.parallel.sequence_parallel;
  f.backend = cfg.comm.backend;
  f.reproducible = cfg.training.reproducible;
  f.canonical_blocks = cfg.training.canonical_blocks();
  f.tie_sums_two_stages = !plan.tie_stages().empty();
  f.head_chunk_rows = cfg.training.head_chunk_rows;
  f.kernels = kernel_environment();
  return f;
}

int64_t LayoutFacts::window_rows() const {
  return parallel::window_micro_batches(dp, replica_grad_accum, grad_accum) * micro_batch;
}

nlohmann::json LayoutFacts::layout_json() const {
  nlohmann::json j = {{"dp", dp},
          {"grad_accum", grad_accum},
          {"micro_batch", micro_batch},
          {"tp", tp},
          {"cp", cp},
          {"ep", ep},
          {"pp", pp},
          {"sequence_parallel", sequence_parallel},
          {"backend", backend},
          {"reproducible", reproducible},
          {"canonical_blocks", canonical_blocks},
          {kTieKey, tie_sums_two_stages}};
  if (!replica_grad_accum.empty()) j["replica_grad_accum"] = replica_grad_accum;
  if (head_chunk_rows > 0) j["head_chunk_rows"] = head_chunk_rows;
  return j;
}

}  // namespace meshtrain::train
