// The layout plan: one object, computed once per rank from (model config,
// mesh, rank, options) without communication, that says for every
// parameter where its state lives: its placement on every mesh axis, the
// rank-local shape and the box of the global tensor it is, the group its
// gradient is summed over, which copy the global norm and the checkpoint
// count (every logical element exactly once), its ZeRO shard (ShardPlan)
// and its pipeline stage. The model is built from its local spec; the
// engine, the optimizer, the gradient norm, checkpoints and `meshtrain plan`
// all read it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/core/precision.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/parallel/shard_plan.h"

namespace meshtrain::parallel {

// Which pipeline rank each chunk sits on (the schedule decides):
//   Loop: chunk c on rank c % pp (GPipe, 1F1B, interleaved 1F1B, ZB-H1);
//   V:    v = 2, chunk c on rank c for c < pp and on 2 pp - 1 - c after, so
//         rank 0 holds the first and the last chunk (ZB-V).
enum class ChunkPlacement { Loop, V };
const char* to_string(ChunkPlacement p);

struct LayoutOptions {
  int zero_stage = 0;
  int virtual_stages = 1;               // pipeline chunks per rank (v)
  std::vector<int64_t> pp_layers;       // blocks per chunk, in chunk order (empty: balanced)
  ChunkPlacement placement = ChunkPlacement::Loop;
  bool sequence_parallel = false;       // replicated norm weights see a sequence shard: partial over tp
  int canonical_blocks = 0;             // reproducible mode's blocks of tp-split sums (model::ModelPartition)
};

// A pipeline chunk: a contiguous range of segments (0 = embedding, l + 1 =
// block l, n_layers + 1 = head) on one pipeline rank.
struct Chunk {
  int first = 0, last = 0;  // segments [first, last]
  int pp_rank = 0;
};

// Chunks of the model for pp ranks x v chunks each, placed by `placement`;
// blocks balanced unless `layers` gives them. ConfigError naming the
// numbers when there are more chunks than blocks, `layers` does not add up
// or the placement does not fit v.
std::vector<Chunk> pipeline_chunks(int64_t n_layers, int pp, int v, const std::vector<int64_t>& layers,
                                   ChunkPlacement placement = ChunkPlacement::Loop);

struct ParamLayout {
  // Pipeline ranks holding it: one, or for a tied embedding whose head sits
  // on another rank, {first stage, head's stage}: the gradient is then also
  // summed over those two ranks of the pp axis (the tie group).
  std::vector<int> stages;
  // The one statement of the ranks its gradient is summed over: the mesh
  // axes (the data axes, edp for a routed expert, plus tp where a sequence
  // shard fed a replicated weight), the tp ranks sharing its piece (partial
  // gradients of a shared KV head), and the tie group of a tied copy.
  comm::Axes reduce_axes;
  int tp_replicas = 1;                    // tp ranks sharing its piece (a KV head)
  bool share_sums = false;                // its gradient is partial over them: summed (not in reproducible mode)
  bool tied = false;                      // also summed over the tie group (its two stages)
  bool counts_in_norm = true;             // this copy is the one the global norm counts
  bool writes_checkpoint = true;          // this copy's boxes go to checkpoints (then split over dp)
};

class LayoutPlan {
 public:
  // global: the model's global spec (build_model_spec of the finalized
  // config) when the caller has it; plans of several ranks share one.
  LayoutPlan(const model::ModelConfig& cfg, const comm::MeshShape& mesh, int rank, const LayoutOptions& options,
             std::shared_ptr<const model::ModelSpec> global = nullptr);

  const comm::MeshShape& mesh() const { return mesh_; }
  int rank() const { return rank_; }
  int coord(comm::Axis a) const { return coords_[a]; }
  const LayoutOptions& options() const { return options_; }
  const model::ModelConfig& model_config() const { return cfg_; }
  const model::ModelSpec& spec() const { return *spec_; }
  const std::shared_ptr<const model::ModelSpec>& global_spec() const { return global_; }
  const std::shared_ptr<const model::ModelSpec>& spec_ptr() const { return spec_; }
  const model::ModelPartition& partition() const { return spec_->partition; }
  const ShardPlan& shards() const { return shards_; }
  const ParamLayout& param(int i) const { return params_[size_t(i)]; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  std::vector<int> my_chunks() const;  // indices into chunks(), ascending
  // The pipeline ranks sharing the tied embedding (first stage, head's
  // stage), empty when one rank holds both; the units this rank must sum
  // over them after the data-parallel reduction.
  const std::vector<int>& tie_stages() const { return tie_stages_; }
  std::vector<int> tied_units() const;
  // Axes the data-parallel engine shards ZeRO state over and sums every
  // gradient over: dp, and cp when context parallelism splits the rows'
  // positions (every cp rank holds the whole model and a part of the loss).
  comm::Axes data_axes() const { return mesh_.cp > 1 ? comm::Axis::Dp | comm::Axis::Cp : comm::Axes(comm::Axis::Dp); }
  // Axes whose ranks hold different parameters (or pieces): the global
  // norm sums over them too.
  comm::Axes model_axes() const { return comm::Axis::Pp | comm::Axis::Tp; }
  // The group of unit u's gradient reduction and ZeRO shards: the data
  // axes, or edp for the routed experts' units.
  comm::Axes unit_axes(int u) const {
    return shards_.unit(u).experts ? comm::Axes(comm::Axis::Edp) : data_axes();
  }

 private:
  model::ModelConfig cfg_;
  comm::MeshShape mesh_;
  int rank_;
  comm::MeshCoords coords_;
  LayoutOptions options_;
  std::vector<Chunk> chunks_;
  std::vector<int> tie_stages_;
  std::shared_ptr<const model::ModelSpec> global_;
  std::shared_ptr<const model::ModelSpec> spec_;
  ShardPlan shards_;
  std::vector<ParamLayout> params_;
};

// Persistent bytes one rank holds for one parameter (values, gradients,
// Adam moments) under its ZeRO stage, from the exact shard overlap.
struct ParamBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};
ParamBytes param_bytes(const LayoutPlan& plan, int param, const PrecisionPolicy& precision);

// `meshtrain plan`: the table of every parameter (placement per axis, local
// shape on each tensor-parallel rank, gradient group, bytes per rank) and
// the persistent bytes of every rank, for a mesh that need not be running.
std::string plan_table(const model::ModelConfig& cfg, const comm::MeshShape& mesh, const LayoutOptions& options,
                       const PrecisionPolicy& precision);

}  // namespace meshtrain::parallel
