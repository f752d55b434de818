// The commit protocol under SIGKILL at each of its steps (fault points, not
// timing): `latest` always names a complete checkpoint, and no committed
// step is ever lost, including when a step is saved again (resumed from an
// older one) with and without atomic exchange.
#include <gtest/gtest.h>

#include "checkpoint/crash_util.h"

namespace meshtrain::checkpoint {
namespace {

using testing::ScratchDir;

// Dies at `point` (or exits 0 if the scenario never reaches it).
void expect_killed_at(const testing::ChildResult& r, const std::string& point, const std::string& log) {
  ASSERT_TRUE(r.signaled && r.signal == SIGKILL) << point << ": child " << r.describe() << "\n"
                                                 << testing::read_text(log);
  EXPECT_NE(testing::read_text(log).find("meshtrain fault injection: " + point), std::string::npos)
      << testing::read_text(log);
}

TEST(CommitCrash, KillAtEveryStepOfAFirstSave) {
  for (const char* point : {"save.prepare", "save.piece", "save.written", "commit.manifest", "commit.publish",
                            "commit.latest", "commit.retention"}) {
    SCOPED_TRACE(point);
    ScratchDir dir;
    const std::string log = dir.str() + "/child.log";
    ASSERT_TRUE(testing::save_in_child(dir.str(), 2, 1, "", log).exited);
    expect_killed_at(testing::save_in_child(dir.str(), 4, 1, std::string(point) + ":kill", log), point, log);
    const int64_t step = testing::expect_latest_consistent(dir.str());
    EXPECT_TRUE(step == 2 || step == 4) << step;
    EXPECT_TRUE(fs::exists(dir.path() / "step-00000002" / "manifest.json"));
    // The next save cleans up and commits.
    ASSERT_TRUE(testing::save_in_child(dir.str(), 6, 1, "", log).exited) << testing::read_text(log);
    EXPECT_EQ(testing::expect_latest_consistent(dir.str()), 6);
    testing::expect_no_leftovers(dir.path());
  }
}

// `latest` names step 4 and step 4 is saved again: a crash must leave a
// complete step 4 behind (the old or the new copy), never a pointer to
// nothing, and the next save must not delete the only copy.
void save_latest_step_again(bool exchange, const std::vector<std::string>& points) {
  for (const std::string& point : points) {
    SCOPED_TRACE(point + (exchange ? " (exchange)" : " (no exchange)"));
    ScratchDir dir;
    const std::string log = dir.str() + "/child.log";
    ASSERT_TRUE(testing::save_in_child(dir.str(), 2, 3, "", log, exchange).exited);  // steps 2, 3, 4
    ASSERT_EQ(testing::expect_latest_consistent(dir.str()), 4);
    expect_killed_at(testing::save_in_child(dir.str(), 4, 1, point + ":kill", log, exchange), point, log);
    EXPECT_EQ(testing::expect_latest_consistent(dir.str()), 4);
    ASSERT_TRUE(testing::save_in_child(dir.str(), 5, 1, "", log, exchange).exited) << testing::read_text(log);
    EXPECT_EQ(testing::expect_latest_consistent(dir.str()), 5);
    const auto complete = list_complete_checkpoints(dir.path());
    ASSERT_EQ(complete.size(), 2u);
    EXPECT_EQ(complete[0].first, 4) << "the resaved step survives";
    const CheckpointReader four = CheckpointReader::open((dir.path() / "step-00000004").string());
    EXPECT_EQ(four.step(), 4);
    testing::expect_no_leftovers(dir.path());
  }
}

TEST(CommitCrash, KillAtEveryStepOfSavingTheLatestStepAgain) {
  save_latest_step_again(true, {"commit.manifest", "commit.publish", "commit.latest", "commit.retention"});
}

TEST(CommitCrash, KillAtEveryStepOfSavingTheLatestStepAgainWithoutExchange) {
  save_latest_step_again(false,
                         {"commit.manifest", "commit.aside", "commit.publish", "commit.latest", "commit.retention"});
}

}  // namespace
}  // namespace meshtrain::checkpoint
