// The tensor-parallel plan as data (docs/math.md, "The tensor-parallel
// plan"): an ordered table of module-name patterns and the style each
// matched module runs in, applied to the pure model spec the way a
// `parallelize` pass applies a plan to a model written for one device.
//   Column     weight [out, in] split by output rows, bias with it (M.34)
//   Row        weight split by input columns, bias replicated and added once
//              after the reduction (M.35)
//   Vocab      an embedding or LM-head table split by vocabulary rows (M.39)
//   Replicate  every rank holds all of it (norms, the router, positions)
// The first matching rule wins; a module no rule matches is replicated.
// Layers state the style they implement and refuse a plan that disagrees
// (require_style), so the table and the layer code cannot drift apart.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "meshtrain/model/placement.h"

namespace meshtrain::model {

struct ModelConfig;
struct ModelSpec;
struct ParamSpec;

enum class TpStyle : uint8_t { Replicate, Column, Row, Vocab };
const char* to_string(TpStyle s);

// The whole granule a split never cuts (docs/math.md (M.38)).
enum class TpGranule : uint8_t {
  Element,  // any row or column
  Head,     // a query head's head_dim rows (or columns)
  KvHead,   // a KV head's rows; fewer KV heads than ranks are shared whole
};

struct TpRule {
  std::string_view module;  // glob over the module name (the parameter name without ".weight"/".bias")
  TpStyle style;
  TpGranule granule = TpGranule::Element;
};
using TpPlan = std::span<const TpRule>;

// The plan every built-in model runs with.
TpPlan default_tp_plan();

// The first rule whose pattern matches `module`, or null (replicated).
const TpRule* match_tp_rule(TpPlan plan, std::string_view module);

// The module a parameter belongs to: its name without the last component.
std::string_view module_of(std::string_view param_name);

// Sets every parameter's style and placement in `pure` (a whole-model spec,
// local = global) from `plan`.
void parallelize(ModelSpec& pure, const ModelConfig& cfg, TpPlan plan = default_tp_plan());

// A layer's check that the plan placed `p` the way the layer computes it:
// `expected`, or Replicate (the same arithmetic) on a group of one.
// ConfigError naming the parameter, its style and the layer's otherwise.
void require_style(const ParamSpec& p, TpStyle expected, int tp_size, std::string_view layer);

}  // namespace meshtrain::model
