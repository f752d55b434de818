// The equivalence harness (SPEC S10's migration path as code): run the same
// config and global batch once on a single rank and once on a parallel
// layout, gather full parameters, gradients and losses after every step and
// compare them. Used by `meshtrain verify` and by tests of every parallel
// feature.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// "dp=4,zero=3,reshard=0,keep=1,reduce=avg,overlap=1,tp=2,sp=on,pp=2,schedule=1f1b,v=1,cp=1,ep=1"
// (schedule: gpipe | 1f1b | interleaved | zb-h1 | zb-v; zb-v implies v=2)
struct Layout {
  int dp = 1;
  int zero_stage = 0;
  bool reshard_after_forward = true;
  bool keep_gathered = false;
  parallel::GradReduce grad_reduce = parallel::GradReduce::Sum;
  bool overlap = true;
  int tp = 1, pp = 1, cp = 1, ep = 1, v = 1;
  bool sequence_parallel = false;
  std::string schedule = "1f1b";
  std::string str() const;
  comm::MeshShape mesh() const;
  parallel::LayoutOptions options() const;
  // The layout's settings written into a [parallel] section (every axis a
  // config has; cp and ep have no keys yet).
  void apply(parallel::ParallelConfig& p) const;
};
Layout parse_layout(const std::string& text);  // ConfigError on unknown keys / values

class Trainer;
// `cfg` with the layout's parallel settings (validated: a pipeline the
// model cannot hold is a ConfigError naming the key).
TrainConfig with_layout(const TrainConfig& cfg, const Layout& layout);
// The whole model's values (or reduced gradients) in global order, every
// tensor whole, as doubles (parallel::gather_global_values): the same vector
// under any dp, tp and pp split. Collective over the trainer's dp, pp and tp
// groups.
std::vector<double> gather_model(Trainer& t, bool grads);

struct StepDiff {
  int64_t step = 0;
  double loss_ref = 0, loss_layout = 0;
  double loss_rel = 0;   // |dl| / |l_ref|
  double grad_rel = 0;   // max |dg| / max |g_ref|
  double param_rel = 0;  // max |dp| / max |p_ref|
  bool counts_equal = true;
};

struct EquivalenceReport {
  std::string layout;
  double tolerance = 0;
  bool bitwise = false;                  // reproducible mode on both runs, zero difference required
  std::vector<std::string> claim_covers;  // with bitwise: what of the layout the claim spans
  std::vector<StepDiff> steps;
  bool pass() const;
  std::string str() const;  // one line per step, then PASS/FAIL
};

// The layout's config and the single-rank reference's (G' = R x G), both
// validated with the layout's mesh: every refusal of the layout (heads over
// tp, more stages than blocks, cp not dividing the rows, reproducible mode's
// power-of-two window, --bitwise with tp or cp) is a ConfigError here,
// before any data is prepared or read.
struct EquivalenceConfigs {
  TrainConfig layout, reference;
};
EquivalenceConfigs equivalence_configs(const TrainConfig& cfg, const Layout& layout, bool bitwise);

// The layout keeps cfg's micro-batch B and accumulation G (global window
// R * G * B rows); the reference runs one rank with G' = R * G. bitwise:
// both run training.reproducible and any difference fails.
EquivalenceReport compare_with_single_rank(const TrainConfig& cfg, const Layout& layout, int steps,
                                           const data::TokenDataset& train_data, double tolerance,
                                           bool bitwise = false);

}  // namespace meshtrain::train
