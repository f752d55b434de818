#include "meshtrain/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"

using namespace meshtrain;

TEST(LrSchedule, WarmupThenCosineToMin) {
  optim::OptimizerConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 4;
  optim::LrSchedule s(c, 104);
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);  // linear warmup: (step + 1) / warmup
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);                 // cosine starts at lr
  EXPECT_NEAR(s.at(54), 0.55, 1e-12);             // halfway: min + (lr - min) / 2
  EXPECT_DOUBLE_EQ(s.at(104), 0.1);               // ends at min_lr
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);               // and stays there
  for (int64_t t = 5; t < 104; ++t) EXPECT_LE(s.at(t), s.at(t - 1));
}

TEST(LrSchedule, ConstantAndLinear) {
  optim::OptimizerConfig c;
  c.lr = 2.0;
  c.min_lr = 0.0;
  c.schedule = optim::ScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(optim::LrSchedule(c, 10).at(7), 2.0);
  c.schedule = optim::ScheduleKind::Linear;
  EXPECT_DOUBLE_EQ(optim::LrSchedule(c, 10).at(5), 1.0);
}

TEST(OptimizerConfig, RejectsBadValues) {
  optim::OptimizerConfig c;
  c.min_lr = 1.0;  // above lr
  EXPECT_THROW(c.validate(), ConfigError);
  optim::OptimizerConfig d;
  d.beta2 = 1.0;
  EXPECT_THROW(d.validate(), ConfigError);
}
