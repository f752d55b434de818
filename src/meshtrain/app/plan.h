// `meshtrain plan`: the layout plan of a config and the planner's prediction
// of its step (memory, communication, FLOPs, time with a machine profile),
// the meshes of a device count, docs/math.md's closed forms without a config, and
// published runs modelled on a machine profile. Nothing runs.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/seed_terms.h"

namespace meshtrain::app {

// The planner's readers of sizes ("10GiB") and counts ("1.7B"), for the
// command line's option checks: one parser, one error text.
using plan::parse_bytes;
using plan::parse_count;
using plan::SeedTerms;

struct PlanRequest {
  std::string config;  // "": docs/math.md's closed forms (or --published)
  std::string layout;  // "dp=2,zero=1,tp=2,pp=2"; "": the config's [parallel] section
  std::vector<std::string> overrides;
  std::string hardware;   // a machine profile (configs/hardware/*.toml); "": no step time
  bool json = false;      // the prediction as JSON instead of the tables
  int devices = 0;        // > 0: every mesh of this many devices (with --layout: checks the count)
  int nodes = 0;          // > 0: the devices split over this many nodes (plan/step_inputs.h)
  std::string published;  // megatron-2021 | megatron-core-175b
  // Config-free options (--params ...), already parsed; sizes in bytes.
  plan::SeedTerms seed;
};
// With a config: every parameter's placement per mesh axis, its local shape
// on each tensor-parallel rank, the axes its gradient is summed over and its
// bytes per rank; with pipeline stages, each stage's segments and predicted
// cost; then the prediction per rank class (plan/plan_report.h). Throws
// ConfigError naming the option or key on bad input.
std::string plan(const PlanRequest& request);

}  // namespace meshtrain::app
