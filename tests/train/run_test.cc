// The layout a config asks for against the world that was started (run.h).
#include "meshtrain/train/run.h"

#include <gtest/gtest.h>

#include "train_fixtures.h"

using namespace meshtrain;

TEST(MeshFor, ExplicitDpMustMatchTheWorld) {
  train::TrainConfig cfg = meshtrain::testing::tiny_train_config();
  cfg.parallel.dp = 2;
  EXPECT_EQ(train::mesh_for(cfg, 2).dp, 2);
  try {
    train::mesh_for(cfg, 4);
    FAIL() << "a dp=2 layout on a world of 4 must be rejected";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("= 2 ranks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("world has 4"), std::string::npos) << msg;
  }
  cfg.parallel.dp = 1;  // no longer "whatever the world is"
  EXPECT_THROW(train::mesh_for(cfg, 2), ConfigError);
}

TEST(MeshFor, ZeroTakesDpFromTheWorld) {
  train::TrainConfig cfg = meshtrain::testing::tiny_train_config();
  cfg.parallel.dp = 0;
  EXPECT_EQ(train::mesh_for(cfg, 3).dp, 3);
}
