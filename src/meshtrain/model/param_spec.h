// Every parameter is described by a ParamSpec: HF-compatible logical name,
// its global shape and how it is placed on the tensor-parallel axis, init
// rule, weight-decay flag and the unit (FSDP-style flat buffer: embedding,
// each block, final, each MoE block's routed experts) it lives in.
// pure_model_spec() gives the model as written for one device (every
// parameter replicated); the tensor-parallel plan (tp_plan.h) places it, and
// build_model_spec() gives the whole model so placed (local = global); localize()
// gives what one rank holds under a partition (local shapes, the box of the
// global tensor, only the units of its pipeline chunks and only the routed
// experts its ep coordinate owns). Layers are built from the local spec;
// gradient groups, norms, ZeRO shards and checkpoint boxes are derived from
// it by the layout plan (parallel/layout_plan.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/core/shape.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/model/placement.h"
#include "meshtrain/model/tp_plan.h"

namespace meshtrain::model {

enum class InitKind { Normal, Ones, Zeros };

struct ParamSpec {
  std::string name;  // e.g. "model.layers.3.mlp.up_proj.weight"
  Shape shape;       // what this rank stores
  Shape global_shape;
  std::vector<int64_t> global_offset;  // where `shape` sits in the global tensor
  TpStyle tp_style = TpStyle::Replicate;  // how the tensor-parallel plan runs its module (tp_plan.h)
  Placement tp;      // placement of the values on the tensor-parallel axis (from the style)
  InitKind init = InitKind::Normal;
  double init_std = 0.02;
  bool weight_decay = true;
  int unit = 0;             // index into ModelSpec::units
  int64_t unit_offset = 0;  // element offset inside the unit's (local) flat buffer
  int global_index = 0;     // index in the whole model's spec
  int expert = -1;          // routed expert this parameter belongs to (MoE), -1: none
  int64_t numel() const { return shape.numel(); }
  // Global row-major flat index of local flat element `i`.
  int64_t global_flat(int64_t i) const;
  bool is_split() const { return shape != global_shape; }
};

// Units 0 .. n_layers + 1 are the segments (embedding, blocks, final);
// the routed experts of every mixture-of-experts block follow as units
// of their own ("layers.3.experts", segment 4): expert parallelism holds
// them only on their owners and sums their gradients over the
// expert-data-parallel group (docs/math.md, "Rule: where experts live"),
// so they cannot share a flat buffer with the block's dense parameters.
struct ParamUnit {
  std::string name;  // "embed", "layers.3", "final", "layers.3.experts"
  int64_t numel = 0;        // local elements (0 when the unit is not held)
  std::vector<int> params;  // indices into ModelSpec::params, in storage order
  bool held = true;
  int segment = 0;          // the segment whose forward and backward use it
  bool experts = false;     // routed experts: placed over ep, reduced over edp
};

struct ModelSpec {
  std::vector<ParamSpec> params;  // held parameters only
  std::vector<ParamUnit> units;   // every unit of the model (held or not)
  ModelPartition partition;
  int64_t total_params() const;  // local elements
  bool tied_head = false;         // the head reads the embedding's unit (tied embeddings)
  // The units segment s reads and writes that this rank holds: its own, its
  // routed experts' if any, and for a tied head the embedding's unit 0.
  std::vector<int> segment_units(int s) const;
  // Parameters that enter matmuls (all but the input embedding, and all of a
  // tied embedding since it is also the head): the 6N of the FLOP formula.
  int64_t matmul_params(const ModelConfig& cfg) const;
  const ParamSpec& find(const std::string& name) const;  // throws
  const ParamSpec* find_or_null(const std::string& name) const;
};

// The model as written for one device: every parameter replicated.
ModelSpec pure_model_spec(const ModelConfig& cfg);
// The whole model under the default tensor-parallel plan:
// parallelize(pure_model_spec(cfg), cfg) (tp_plan.h).
ModelSpec build_model_spec(const ModelConfig& cfg);

// What the rank at `partition` holds of `global` (build_model_spec output).
// ConfigError naming the arithmetic when a count cannot be placed.
ModelSpec localize(const ModelSpec& global, const ModelConfig& cfg, const ModelPartition& partition);

// Tensor-parallel shape rules of the model as a whole (heads whole per rank,
// KV heads split or shared); ConfigError naming both numbers.
void check_tensor_parallel(const ModelConfig& cfg, int tp);

// Model FLOPs per token: 6 * matmul params + 12 * layers * d_model * seq
// (the formula bench-small reports, comparable across frameworks).
double model_flops_per_token(const ModelConfig& cfg, int64_t seq);

}  // namespace meshtrain::model
