#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/async_checkpointer.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/comm/launch.h"

namespace meshtrain::checkpoint {
namespace {

using testing::Partition;
using testing::ScratchDir;
namespace fs = std::filesystem;

TEST(AsyncSave, TrainingContinuesWhileWritingAndTheSnapshotIsTheStagedState) {
  ScratchDir dir;
  std::atomic<int> steps_while_pending{0};
  comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
    AsyncCheckpointer ckpt(*ctx.world, dir.str());
    auto state = testing::make_state(1);
    std::vector<std::vector<char>> storage;
    for (int64_t step = 1; step <= 3; ++step) {
      state = testing::make_state(step);
      ckpt.save(testing::make_request(state, step, Partition::Flat, 2, ctx.rank, storage));
      // The caller overwrites its buffers at once (the next "update").
      for (auto& buf : storage) std::fill(buf.begin(), buf.end(), char(0x11));
      for (int k = 0; k < 5 && !ckpt.poll(); ++k) {
        if (ctx.rank == 0) ++steps_while_pending;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    const std::string last = ckpt.wait();
    EXPECT_TRUE(last.empty() || last == (dir.path() / "step-00000003").string());
    EXPECT_EQ(ckpt.last_committed(), (dir.path() / "step-00000003").string());
  });
  const CheckpointReader r = CheckpointReader::open(dir.str());
  EXPECT_EQ(r.step(), 3);
  for (const auto& t : testing::make_state(3)) {
    std::vector<char> got(t.bytes.size());
    r.read_all(t.name, got.data(), t.dtype);
    EXPECT_EQ(got, t.bytes) << t.name;
  }
}

TEST(AsyncSave, WriterFailureOnOneRankIsReportedOnAllRanksWithinASteps) {
  ScratchDir dir;
  std::vector<std::string> errors(2);
  std::vector<int> polls_until_error(2, -1);
  comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
    SaveOptions opts;
    opts.before_piece = [](int rank, const std::string& tensor) {
      if (rank == 1 && tensor == "c.cube") throw CheckpointError("injected disk failure");
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // still writing when 1 fails
    };
    AsyncCheckpointer ckpt(*ctx.world, dir.str(), opts);
    const auto state = testing::make_state(9);
    std::vector<std::vector<char>> storage;
    ckpt.save(testing::make_request(state, 9, Partition::Flat, 2, ctx.rank, storage));
    for (int step = 0; step < 1000; ++step) {
      try {
        if (ckpt.poll()) break;
      } catch (const CheckpointError& e) {
        errors[size_t(ctx.rank)] = e.what();
        polls_until_error[size_t(ctx.rank)] = step;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("failed on rank 1"), std::string::npos) << "rank " << r << ": " << errors[size_t(r)];
    EXPECT_GE(polls_until_error[size_t(r)], 0);
  }
  EXPECT_EQ(polls_until_error[0], polls_until_error[1]);  // the same step on every rank
  EXPECT_NE(errors[1].find("injected disk failure"), std::string::npos) << errors[1];
  EXPECT_FALSE(fs::exists(dir.path() / "latest"));
  EXPECT_FALSE(fs::exists(dir.path() / ".tmp-step-00000009"));
}

}  // namespace
}  // namespace meshtrain::checkpoint
