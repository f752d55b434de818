// The asynchronous checkpointer: training steps run while the write is
// pending (asserted, with the writers held by an explicit gate), the
// snapshot is the staged state, and a writer failure on one rank reaches
// every rank at the same step.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/async_checkpointer.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/comm/launch.h"

namespace meshtrain::checkpoint {
namespace {

using testing::Partition;
using testing::ScratchDir;
namespace fs = std::filesystem;

// A one-shot event. wait() gives up after a bound so a broken
// implementation fails the test instead of hanging it.
class Event {
 public:
  void set() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  bool wait(std::chrono::seconds bound = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, bound, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

TEST(AsyncSave, TrainingContinuesWhileWritingAndTheSnapshotIsTheStagedState) {
  ScratchDir dir;
  constexpr int kStepsWhilePending = 3;
  std::vector<int> steps_while_pending(2, 0);
  for (int64_t step = 1; step <= 2; ++step) {
    Event release[2];
    comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
      SaveOptions o;
      // The writer of each rank waits for the gate: the save stays pending
      // however fast the disk is. A synchronous save would block here in
      // save() itself (the gate opens only after the pending steps).
      o.before_piece = [&](int rank, const std::string&) {
        if (!release[rank].wait()) throw CheckpointError("writer gate never opened");
      };
      AsyncCheckpointer ckpt(*ctx.world, dir.str(), o);
      auto state = testing::make_state(step);
      std::vector<std::vector<char>> storage;
      ckpt.save(testing::make_request(state, step, Partition::Flat, 2, ctx.rank, storage));
      // The caller overwrites its buffers at once (the next "update").
      for (auto& buf : storage) std::fill(buf.begin(), buf.end(), char(0x11));
      for (int k = 0; k < kStepsWhilePending; ++k) {
        EXPECT_FALSE(ckpt.poll()) << "the save finished although its writer is held";
        EXPECT_TRUE(ckpt.pending());
        ++steps_while_pending[size_t(ctx.rank)];
      }
      release[ctx.rank].set();
      while (!ckpt.poll()) {
      }
      EXPECT_FALSE(ckpt.pending());
      EXPECT_EQ(ckpt.last_committed(), (dir.path() / step_dir_name(step)).string());
    });
  }
  EXPECT_EQ(steps_while_pending, std::vector<int>(2, 2 * kStepsWhilePending));
  const CheckpointReader r = CheckpointReader::open(dir.str());
  EXPECT_EQ(r.step(), 2);
  for (const auto& t : testing::make_state(2)) {
    std::vector<char> got(t.bytes.size());
    r.read_all(t.name, got.data(), t.dtype);
    EXPECT_EQ(got, t.bytes) << t.name;
  }
}

TEST(AsyncSave, WriterFailureOnOneRankIsReportedOnAllRanksAtTheSameStep) {
  ScratchDir dir;
  std::vector<std::string> errors(2);
  std::vector<int> polls_until_error(2, -1);
  Event rank1_failed;
  comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
    SaveOptions opts;
    opts.before_piece = [&](int rank, const std::string& tensor) {
      if (rank == 1 && tensor == "c.cube") {
        rank1_failed.set();
        throw CheckpointError("injected disk failure");
      }
      // Rank 0 is still writing when rank 1 fails.
      if (rank == 0 && tensor == "a.weight" && !rank1_failed.wait()) throw CheckpointError("rank 1 never failed");
    };
    AsyncCheckpointer ckpt(*ctx.world, dir.str(), opts);
    const auto state = testing::make_state(9);
    std::vector<std::vector<char>> storage;
    ckpt.save(testing::make_request(state, 9, Partition::Flat, 2, ctx.rank, storage));
    for (int step = 0; step < 10000000; ++step) {
      try {
        if (ckpt.poll()) break;
      } catch (const CheckpointError& e) {
        errors[size_t(ctx.rank)] = e.what();
        polls_until_error[size_t(ctx.rank)] = step;
        break;
      }
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
