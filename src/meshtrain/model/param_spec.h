// Every parameter is described by a ParamSpec: HF-compatible logical name,
// global shape, init rule, weight-decay flag and the unit (FSDP-style flat
// buffer: embedding, each block, final) it lives in. Gradient sync, global
// norms, ZeRO ownership and checkpoint offsets all derive from these specs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/shape.h"
#include "meshtrain/model/model_config.h"

namespace meshtrain::model {

enum class InitKind { Normal, Ones, Zeros };

struct ParamSpec {
  std::string name;  // e.g. "model.layers.3.mlp.up_proj.weight"
  Shape shape;
  InitKind init = InitKind::Normal;
  double init_std = 0.02;
  bool weight_decay = true;
  int unit = 0;            // index into ModelSpec::units
  int64_t unit_offset = 0;  // element offset inside the unit's flat buffer
  int64_t numel() const { return shape.numel(); }
};

struct ParamUnit {
  std::string name;  // "embed", "layers.3", "final"
  int64_t numel = 0;
  std::vector<int> params;  // indices into ModelSpec::params, in storage order
};

struct ModelSpec {
  std::vector<ParamSpec> params;
  std::vector<ParamUnit> units;
  int64_t total_params() const;
  // Parameters that enter matmuls (all but the input embedding, and all of a
  // tied embedding since it is also the head): the 6N of the FLOP formula.
  int64_t matmul_params(const ModelConfig& cfg) const;
  const ParamSpec& find(const std::string& name) const;  // throws
};

ModelSpec build_model_spec(const ModelConfig& cfg);

// Model FLOPs per token: 6 * matmul params + 12 * layers * d_model * seq
// (the formula bench-small reports, comparable across frameworks).
double model_flops_per_token(const ModelConfig& cfg, int64_t seq);

}  // namespace meshtrain::model
