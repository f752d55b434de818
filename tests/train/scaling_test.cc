// `meshtrain scale` (train/scaling.h): a series runs every runnable layout,
// names the smallest runnable one as the baseline, computes docs/math.md (M.68) from
// the measured times, reports the layouts it cannot run with the reason,
// and draws them. No timing is asserted (timings belong in bench/).
#include <gtest/gtest.h>

#include <sstream>

#include "meshtrain/core/threading.h"
#include "meshtrain/train/scaling.h"
#include "meshtrain/train/scaling_chart.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

TEST(Scaling, StrongSeriesAgainstTheSmallestRunnableLayout) {
  auto cfg = tiny_train_config();
  cfg.training.micro_batch = 4;
  cfg.training.grad_accum = 1;
  // Expert parallelism needs experts (this model is dense); a pipeline of two stages runs.
  const std::vector<train::Layout> layouts = {train::parse_layout("dp=2,ep=2"), train::parse_layout("dp=2,zero=2"),
                                              train::parse_layout("dp=4"), train::parse_layout("pp=2,schedule=gpipe")};
  // A device is one thread: docs/math.md (M.68) against D_base.
  const train::ScaleReport r = train::run_scaling(cfg, layouts, 2, false, varied_documents(64, 3), nullptr, 1);
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_FALSE(r.points[0].ran);
  EXPECT_NE(r.points[0].error.find("set model.n_experts"), std::string::npos) << r.points[0].error;
  ASSERT_EQ(r.baseline, 1) << "dp=2 is the first of the smallest layouts that run (ep=2 cannot)";
  for (size_t i = 1; i < 4; ++i) {
    const train::ScalePoint& p = r.points[i];
    ASSERT_TRUE(p.ran) << p.error;
    EXPECT_EQ(p.rows, 4) << "strong scaling keeps the global batch";
    EXPECT_EQ(p.updates, 3) << "a warm-up step and two measured ones, all applied";
    EXPECT_GT(p.step_s, 0);
    EXPECT_GT(p.peak_bytes, 0);
    EXPECT_EQ(p.threads_per_rank, 1);
    const double want = (r.points[1].step_s / p.step_s) / (double(p.devices) / r.points[1].devices);  // (M.68)
    EXPECT_DOUBLE_EQ(p.efficiency, want);
  }
  EXPECT_EQ(r.points[2].micro_batch, 1) << "4 rows over 4 replicas";
  EXPECT_EQ(r.points[3].micro_batch, 4) << "one replica of two stages takes the whole batch";
  EXPECT_DOUBLE_EQ(r.points[1].efficiency, 1.0);
  const std::string table = r.table();
  EXPECT_NE(table.find("baseline: dp=2,zero=2"), std::string::npos) << table;
  EXPECT_NE(table.find("cannot run"), std::string::npos) << table;
  EXPECT_NE(table.find("a device is 1 thread, so a layout of D ranks computes on D x 1 threads"), std::string::npos)
      << table;
  // Every row's columns line up under the header, however long the layout.
  std::istringstream lines(table);
  size_t header_end = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("  layout ") == 0) header_end = line.size();
    else if (header_end && line.find("ms ") != std::string::npos && line.find("cannot run") == std::string::npos)
      EXPECT_EQ(line.size(), header_end) << table;
  }
  EXPECT_GT(header_end, 0u) << table;
  const std::string svg = train::scaling_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("D=4"), std::string::npos);
  EXPECT_EQ(r.json()["points"].size(), 4u);
}

// The default compares like with like on the same cores: every layout
// computes on the same threads, so E is the throughput over the baseline's.
TEST(Scaling, TheDefaultSeriesRunsEveryLayoutOnTheSameThreads) {
  auto cfg = tiny_train_config();
  cfg.training.micro_batch = 4;
  cfg.training.grad_accum = 1;
  const train::ScaleReport r = train::run_scaling(
      cfg, {train::parse_layout("dp=1"), train::parse_layout("dp=2"), train::parse_layout("dp=4")}, 2, false,
      varied_documents(64, 3), nullptr);
  ASSERT_EQ(r.points.size(), 3u);
  EXPECT_EQ(r.threads, hardware_cores());
  EXPECT_EQ(r.points[0].threads_per_rank, hardware_cores()) << "one rank takes every thread";
  EXPECT_EQ(r.points[1].threads_per_rank, std::max(1, hardware_cores() / 2));
  for (const train::ScalePoint& p : r.points) {
    ASSERT_TRUE(p.ran) << p.error;
    EXPECT_DOUBLE_EQ(p.efficiency, p.tokens_per_s / r.points[0].tokens_per_s);
    EXPECT_DOUBLE_EQ(p.speedup, p.efficiency);
    EXPECT_DOUBLE_EQ(r.ideal_tokens_per_s(p), r.points[0].tokens_per_s) << "the same cores: the ideal is the baseline";
  }
  const std::string table = r.table();
  EXPECT_NE(table.find("every layout computes on the same " + std::to_string(hardware_cores()) + " thread"),
            std::string::npos)
      << table;
  if (hardware_cores() < 4) EXPECT_NE(table.find("* more threads than the"), std::string::npos) << table;
  EXPECT_EQ(r.json()["threads"]["same_total"], hardware_cores());
}

TEST(Scaling, WeakSeriesGrowsTheBatch) {
  auto cfg = tiny_train_config();
  cfg.training.micro_batch = 2;
  const train::ScaleReport r = train::run_scaling(cfg, {train::parse_layout("dp=1"), train::parse_layout("dp=2")}, 1,
                                                  true, varied_documents(64, 3), nullptr, 1);
  ASSERT_TRUE(r.points[1].ran) << r.points[1].error;
  EXPECT_EQ(r.points[0].rows, 2);
  EXPECT_EQ(r.points[1].rows, 4);
  EXPECT_DOUBLE_EQ(r.points[1].efficiency, r.points[0].step_s / r.points[1].step_s);
  EXPECT_THROW(train::run_scaling(cfg, {}, 1, false, varied_documents(8, 3), nullptr), ConfigError);
}
