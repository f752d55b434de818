// The equivalence harness (docs/math.md's "Rule: evidence for a layout or
// an optimization" as code): run the same config and global batch once on a
// single rank and once on a parallel layout, gather full parameters,
// gradients, updates and losses after every step and compare them tensor by
// tensor. Used by `meshtrain verify` and by tests of every parallel
// feature; under training.precision = "fp64" the reordered sums of a layout
// differ by ~1e-15 instead of ~1e-7, so a tolerance of 1e-10 leaves no room
// for a real error to hide (docs/reproducibility.md, "Equivalence checks").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// "dp=4,zero=3,reshard=0,keep=1,reduce=avg,overlap=1,tp=2,sp=on,pp=2,schedule=1f1b,v=1,cp=1,ep=1"
// (schedule: gpipe | 1f1b | interleaved | zb-h1 | zb-v; zb-v implies v=2);
// "ga=3+3+2": each replica's micro-batches per update (uneven; dp is their count)
struct Layout {
  int dp = 1;
  std::vector<int64_t> replica_grad_accum;  // empty: every replica runs the config's grad_accum
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
  // config has, cp and ep included).
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

// A parameter tensor's place in gather_model's vector: [begin, end).
struct GlobalTensor {
  std::string name;
  int64_t begin = 0, end = 0;
};
// Every parameter of the whole model, in gather_model's order.
std::vector<GlobalTensor> global_tensors(const model::ModelConfig& cfg);

// The noise floor under training.precision, as a fraction of a vector's
// largest magnitude: values below it are compared at that level, not
// relative to themselves. Why: a gradient that is zero in exact arithmetic
// (a key bias's: softmax ignores a shift of a query's scores) is rounding
// noise, and two noises differ by 100% of themselves. 1e-6 under fp64 and
// fp32, 1e-5 under bf16 and fp16. (Measured on the test models: a key
// bias's gradient lies 1e-20, 1e-11 and 1e-7 of the largest gradient below
// it under fp64, fp32 and bf16, every other tensor's above 4e-5.)
double noise_floor_fraction(const std::string& precision);

// The largest per-tensor relative difference of `a` from `ref`: each tensor
// on its own, max |a - ref| / max(max |ref|, floor_fraction x the vector's
// largest |ref|) over its elements, and the tensor where it is largest.
// Tensors marked in `skip` (by index, when given) are not compared. Why per
// tensor: relative to the whole vector's largest element, an error in a
// tensor of small values (a weight decay term of 2e-6 per step) stays far
// below any tolerance.
struct TensorDiff {
  double rel = 0;
  std::string tensor;  // the worst tensor ("" when every tensor matches exactly)
};
TensorDiff per_tensor_diff(const std::vector<double>& a, const std::vector<double>& ref,
                           const std::vector<GlobalTensor>& tensors, double floor_fraction,
                           const std::vector<bool>& skip = {});

// What one training step leaves: its metrics (loss, supervised count,
// gradient norm, ...) and, gathered whole in global order, the reduced
// gradients, the parameters after the update and the update itself
// (parameters after minus before the step).
struct StepRecord {
  StepMetrics metrics;
  std::vector<double> grads, params, update;
};
// Runs `steps` steps of `t` and records each (collective over the
// trainer's groups, as gather_model; every rank returns the same records).
std::vector<StepRecord> record_steps(Trainer& t, int steps);

// The tolerance a comparison under training.precision defaults to (per
// tensor): fp64 1e-10 (a layout's reordered sums differ by ~1e-15 there),
// fp32 5e-4 and bf16/fp16 5e-2 (tensor parallelism over 4 ranks reaches
// 2e-4 and 3e-2 per tensor on the test models: the other rounding of the
// forward's sums, carried through three steps).
double default_tolerance(const std::string& precision);
// The update deltas' tolerance for a comparison at `tolerance`: at least
// 1e-8 under fp64, 0.1 under fp32, not checked (infinity) under the 16-bit
// policies. Why: AdamW divides each gradient by its own magnitude plus eps,
// so the step of an element whose gradient is near zero changes by up to
// lr d g_max / eps for a rounding d g_max of that gradient (d relative to
// the largest gradient g_max): at most 1e-8 lr under fp64 (d = 1e-16,
// g_max <= 1 after clipping; 7e-11 measured on the demo model), 1e-2
// measured per tensor under fp32 at tp = 4, whole steps under bf16. A
// dropped weight decay term is 2e-3 of a step (docs/reproducibility.md,
// "Equivalence checks").
double update_tolerance(const std::string& precision, double tolerance);

struct StepDiff {
  int64_t step = 0;
  double loss_ref = 0, loss_layout = 0;
  double loss_rel = 0;  // |dl| / |l_ref|
  TensorDiff grad;      // reduced gradients
  TensorDiff update;    // parameters after minus before the step
  TensorDiff param;     // parameters after the step
  bool counts_equal = true;
};

struct EquivalenceReport {
  std::string layout;
  std::string precision = "fp32";  // training.precision of both runs
  double tolerance = 0;            // loss, gradients, parameters
  double update_tolerance = 0;     // update deltas (update_tolerance())
  bool bitwise = false;            // reproducible mode on both runs, zero difference required
  std::vector<std::string> claim_covers;  // with bitwise: what of the layout the claim spans
  // Tensors whose reference gradient was below the noise floor at some step
  // (zero in exact arithmetic): AdamW normalizes their rounding noise into
  // steps, so their updates and parameters are not compared from then on.
  std::vector<std::string> noise_driven;
  std::vector<StepDiff> steps;
  bool pass() const;
  std::string str() const;  // one line per step (each comparison's worst tensor named), then PASS/FAIL
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
// Compares a layout's records with the reference's, step by step, per
// tensor, at `tolerance` (updates at update_tolerance(precision, tolerance)).
EquivalenceReport compare_records(const std::vector<StepRecord>& ref, const std::vector<StepRecord>& layout,
                                  const std::vector<GlobalTensor>& tensors, const std::string& precision,
                                  double tolerance);

// The layout keeps cfg's micro-batch B and accumulation G (global window
// R * G * B rows); the reference runs one rank with G' = R * G. bitwise:
// both run training.reproducible and any difference fails.
EquivalenceReport compare_with_single_rank(const TrainConfig& cfg, const Layout& layout, int steps,
                                           const data::TokenDataset& train_data, double tolerance,
                                           bool bitwise = false);

}  // namespace meshtrain::train
