// Covers src/meshtrain/plan/compute_cost.cc and plan/step_time.cc (predicted step time of published runs).
// The planner against published large-scale runs (docs/planning.md): for
// every row of the Megatron-LM 2021 table on A100 and both ends of the
// Megatron-Core GPT-3 175B strong-scaling series on H100, the predicted
// percentage of peak (the paper's FLOP count over the predicted step time)
// lies within 5 points of the published one, and the run fits in memory.
// The machine profiles are public figures (configs/hardware/*.toml), not
// fitted to these rows.
#include <gtest/gtest.h>

#include <cstdio>

#include "meshtrain/plan/published_runs.h"
#include "meshtrain/train/meta_step.h"

using namespace meshtrain;

namespace {

std::string hardware_file(const char* name) { return std::string(MESHTRAIN_HARDWARE_DIR) + "/" + name; }

void check_rows(const std::vector<plan::PublishedRun>& runs, const plan::HardwareProfile& hw) {
  for (const plan::PublishedRun& r : runs) {
    const plan::PublishedCheck c = plan::check_published(r, hw, train::meta_step_recorder());
    std::printf("%-24s published %5.1f%%  predicted %5.1f%%  step %8.2f s (makespan %.2f bubble %.3f tp %.2f exposed %.3f update %.3f)  peak %6.1f GiB\n", r.label.c_str(),
                r.published_percent, c.predicted_percent, c.step_s, c.makespan_s, c.bubble, c.tp_s, c.exposed_s, c.update_s, double(c.peak_bytes) / (1 << 30));
    EXPECT_NEAR(c.predicted_percent, r.published_percent, 5.0) << r.label;
  }
}

}  // namespace

TEST(PublishedRuns, Megatron2021OnA100) {
  check_rows(plan::megatron_2021_runs(), plan::load_hardware(hardware_file("a100-80gb.toml")));
}

TEST(PublishedRuns, MegatronCore175bStrongScalingOnH100) {
  check_rows(plan::megatron_core_175b_runs(), plan::load_hardware(hardware_file("h100-sxm.toml")));
}
