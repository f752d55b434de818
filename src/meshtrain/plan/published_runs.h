// Published large-scale training runs the planner is checked against
// (tests/plan/published_test.cc, docs/planning.md): the Megatron-LM 2021
// GPT weak-scaling table on A100 (Narayanan et al., "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM", SC'21, arXiv
// 2104.04473, Table 1) and the Megatron-Core GPT-3 175B strong-scaling run on
// H100 (the Megatron-LM README: 96 to 4,608 GPUs at 1,152 sequences, MFU 47%
// to 42%). Each row becomes a StepInputs (model, mesh, window, precision,
// recomputation) and the planner's step time gives the percentage of peak
// the paper's own FLOP count implies, compared like with like.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/rank_step.h"
#include "meshtrain/plan/step_inputs.h"

namespace meshtrain::plan {

struct PublishedRun {
  std::string label;    // "GPT 1.7B"
  std::string source;   // where the row is printed
  StepInputs inputs;    // the run as the planner models it
  double published_percent = 0;  // of peak, as published
  double published_tflops = 0;   // per GPU, as published (0: not given)
  bool flops_count_recompute = true;  // the published FLOP count includes the recomputed forward
};

// The ten rows of Narayanan et al. 2021, Table 1 (A100, fp16, full
// recomputation, V = 51,200, s = 2,048).
std::vector<PublishedRun> megatron_2021_runs();
// GPT-3 175B on H100, the two published ends of the strong-scaling series.
std::vector<PublishedRun> megatron_core_175b_runs();

struct PublishedCheck {
  double predicted_percent = 0;
  double predicted_tflops = 0;  // per GPU, by the published FLOP count
  double step_s = 0;
  double makespan_s = 0, bubble = 0, exposed_s = 0, update_s = 0, tp_s = 0;
  int64_t peak_bytes = 0;
  bool fits = true;
};
// The paper's FLOPs per iteration (megatron_flops) over the predicted step
// time, per GPU and as a percentage of the profile's peak.
PublishedCheck check_published(const PublishedRun& run, const HardwareProfile& hw, const StepRecorder& record);

// "megatron-2021" | "megatron-core-175b"; ConfigError naming the choices.
std::vector<PublishedRun> published_runs(const std::string& name);
// The rows side by side: published and predicted percentage of peak, the
// predicted step and peak memory (`meshtrain plan --published NAME`).
std::string render_published(const std::vector<PublishedRun>& runs, const HardwareProfile& hw,
                             const StepRecorder& record);

}  // namespace meshtrain::plan
