#include "meshtrain/parallel/pipeline_config.h"

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/parallel/stage_partition.h"

namespace meshtrain::parallel {

void check_pipeline(const ParallelConfig& p, const model::ModelConfig& model, int64_t micro_batches) {
  check_schedule(p.schedule, p.pp, int(micro_batches), p.virtual_stages);
  const int64_t chunks = int64_t(p.pp) * p.virtual_stages;
  MT_REQUIRE(ConfigError, chunks <= model.n_layers, "parallel.pp = ", p.pp,
             " x parallel.virtual_stages = ", p.virtual_stages, " = ", chunks,
             " pipeline chunks but model.n_layers = ", model.n_layers, ": every chunk needs at least one block");
  if (p.virtual_stages > 1 && p.pp_layers.empty())
    MT_REQUIRE(ConfigError, model.n_layers % chunks == 0, "parallel.virtual_stages = ", p.virtual_stages,
               " does not divide the ", model.n_layers, " / ", p.pp, " blocks of a stage into equal chunks (",
               model.n_layers, " % ", chunks, " = ", model.n_layers % chunks,
               "): choose v dividing them or give every chunk's blocks in parallel.pp_layers");
  pipeline_chunks(model.n_layers, p.pp, p.virtual_stages, p.pp_layers, placement_of(p.schedule));
}

std::vector<int64_t> chunk_blocks(const ParallelConfig& p, const model::ModelConfig& model, const MicroBatchShape& mb,
                                  std::string* how) {
  auto say = [&](const std::string& s) {
    if (how) *how = s;
  };
  if (!p.pp_layers.empty()) {
    say("blocks per chunk from parallel.pp_layers");
    return p.pp_layers;
  }
  const int chunks = p.pp * p.virtual_stages;
  if (p.pp > 1 && p.virtual_stages == 1) {
    say("blocks balanced by the cost model");
    return balance_blocks(segment_costs(model, mb.rows, mb.seq, mb.recompute, mb.compute), chunks);
  }
  say("equal blocks per chunk");
  return std::vector<int64_t>(size_t(chunks), model.n_layers / chunks);
}

void set_pipeline_options(LayoutOptions& o, const ParallelConfig& p, const model::ModelConfig& model,
                          const MicroBatchShape& mb) {
  o.virtual_stages = p.virtual_stages;
  o.placement = placement_of(p.schedule);
  o.pp_layers = chunk_blocks(p, model, mb);
}

std::string pipeline_table(const ParallelConfig& p, const model::ModelConfig& model, const MicroBatchShape& mb,
                           int64_t micro_batches, DType param_dtype) {
  std::string how;
  const std::vector<int64_t> blocks = chunk_blocks(p, model, mb, &how);
  const auto chunks = pipeline_chunks(model.n_layers, p.pp, p.virtual_stages, blocks, placement_of(p.schedule));
  return partition_table(segment_costs(model, mb.rows, mb.seq, mb.recompute, mb.compute), chunks,
                         make_schedule(p.schedule, p.pp, int(micro_batches), p.virtual_stages), param_dtype, how);
}

}  // namespace meshtrain::parallel
