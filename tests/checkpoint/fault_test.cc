// Crash safety (SIGKILL at random fault points of saves) and detection of every
// kind of damage, each with its own message, before caller memory is touched.
#include <gtest/gtest.h>
#include <signal.h>

#include <random>

#include "checkpoint/crash_util.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/comm/launch.h"

namespace meshtrain::checkpoint {
namespace {

using testing::Partition;
using testing::ScratchDir;
namespace fs = std::filesystem;

// Each trial kills a child process that saves 4 steps at a seeded random
// fault point (any site the save reaches: preparation, piece writes,
// collectives, every commit step), then checks what is on disk. The child is
// a fresh executable (posix_spawn), not a fork of this threaded process.
TEST(CrashSafety, SigkillAtRandomPointsOfSavesAlwaysLeavesLatestComplete) {
  ScratchDir dir, calibration;
  const std::string log = dir.str() + "/child.log";
  ASSERT_TRUE(testing::save_in_child(dir.str(), 0, 1, "", log).exited) << testing::read_text(log);
  // How often a 4-step save reaches each point, so every draw fires.
  ASSERT_TRUE(testing::save_in_child(calibration.str(), 1, 4, "count", log).exited);
  const auto counts = testing::fault_point_counts(log);
  const std::vector<std::pair<std::string, int64_t>> sites(counts.begin(), counts.end());
  ASSERT_GE(sites.size(), 6u) << testing::read_text(log);
  std::mt19937 gen(42);
  const int kTrials = 30;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto& [site, n] = sites[gen() % sites.size()];
    const std::string fault = site + "#" + std::to_string(1 + int64_t(gen() % uint64_t(n))) + ":kill";
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + fault);
    const auto r = testing::save_in_child(dir.str(), 1 + trial * 10, 4, fault, log);
    ASSERT_TRUE(r.signaled && r.signal == SIGKILL) << "child " << r.describe() << "\n" << testing::read_text(log);
    testing::expect_latest_consistent(dir.str());
  }
  // The next save cleans whatever the killed ones left.
  ASSERT_TRUE(testing::save_in_child(dir.str(), 1000, 1, "", log).exited) << testing::read_text(log);
  testing::expect_no_leftovers(dir.path());
  EXPECT_EQ(testing::expect_latest_consistent(dir.str()), 1000);
}

class Damage : public ::testing::Test {
 protected:
  void SetUp() override {
    comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
      std::vector<std::vector<char>> storage;
      save_checkpoint(*ctx.world, root_.str(),
                      testing::make_request(testing::make_state(7), 7, Partition::Flat, 2, ctx.rank, storage));
    });
    step_dir_ = root_.path() / "step-00000007";
  }
  // open() must fail with `needle` in the message.
  void expect_open_fails(const std::string& needle) {
    try {
      CheckpointReader::open(root_.str());
      ADD_FAILURE() << "open succeeded; expected an error with '" << needle << "'";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  void edit_first_piece(const std::function<void(nlohmann::json&)>& edit) {
    testing::tamper_manifest(step_dir_, [&](nlohmann::json& j) { edit(j["tensors"][0]["pieces"][0]); });
  }
  ScratchDir root_;
  fs::path step_dir_;
};

TEST_F(Damage, TruncatedShard) {
  fs::resize_file(step_dir_ / "rank-00001.bin", fs::file_size(step_dir_ / "rank-00001.bin") - 10);
  expect_open_fails("is truncated");
}

TEST_F(Damage, FlippedByte) {
  {
    std::fstream f(step_dir_ / "rank-00001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(5);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(5);
    f.write(&c, 1);
  }
  expect_open_fails("SHA-256 mismatch");
}

TEST_F(Damage, FlippedByteWithLazyVerificationLeavesCallerMemoryUntouched) {
  {
    std::fstream f(step_dir_ / "rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("\x7f\x7f", 2);
  }
  const CheckpointReader r = CheckpointReader::open(root_.str(), {Verify::OnRead});
  const auto& t = r.tensor(r.names()[0]);
  std::vector<char> dst(t.nbytes(), 0x33);
  const std::vector<char> before = dst;
  EXPECT_THROW(r.read_all(t.name, dst.data(), t.dtype), CheckpointError);
  EXPECT_EQ(dst, before);
}

TEST_F(Damage, MissingFile) {
  fs::remove(step_dir_ / "rank-00000.bin");
  expect_open_fails("missing shard file");
}

TEST_F(Damage, MalformedDigest) {
  edit_first_piece([](nlohmann::json& p) { p["sha256"] = "abc"; });
  expect_open_fails("not a 64-digit hex SHA-256");
}

TEST_F(Damage, WrongDigest) {
  edit_first_piece([](nlohmann::json& p) { p["sha256"] = std::string(64, 'a'); });
  expect_open_fails("SHA-256 mismatch");
}

TEST_F(Damage, OverlappingRanges) {
  // Tensor a.weight [6, 10] is split in two flat halves; grow the first.
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a.weight") {
        auto& p = t["pieces"][0];
        p["length"][0] = p["length"][0].get<int64_t>() + 1;
        p["byte_length"] = p["byte_length"].get<int64_t>() + 10 * 4;
      }
  });
  expect_open_fails("overlap");
}

TEST_F(Damage, Gap) {
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a.weight") t["pieces"].erase(t["pieces"].size() - 1);
  });
  expect_open_fails("gap in coverage");
}

TEST_F(Damage, DotDotPath) {
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) { j["files"][0]["path"] = "../step-00000007/rank-00000.bin"; });
  expect_open_fails("'..' component");
}

TEST_F(Damage, AbsolutePath) {
  testing::tamper_manifest(step_dir_, [&](nlohmann::json& j) { j["files"][0]["path"] = (step_dir_ / "rank-00000.bin").string(); });
  expect_open_fails("absolute path");
}

TEST_F(Damage, SymlinkEscapingTheDirectory) {
  // Same bytes, but outside: only the location is wrong.
  ScratchDir elsewhere;
  fs::copy_file(step_dir_ / "rank-00000.bin", elsewhere.path() / "rank-00000.bin");
  fs::remove(step_dir_ / "rank-00000.bin");
  fs::create_symlink(elsewhere.path() / "rank-00000.bin", step_dir_ / "rank-00000.bin");
  expect_open_fails("outside the checkpoint directory");
}

TEST_F(Damage, WrongShape) {
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a.weight") t["shape"] = {5, 10};
  });
  expect_open_fails("lies outside the global shape");
}

TEST_F(Damage, WrongDtype) {
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a.weight") t["dtype"] = "f64";
  });
  expect_open_fails("has byte_length");
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) { j["tensors"][0]["dtype"] = "q4"; });
  expect_open_fails("unknown dtype");
}

TEST_F(Damage, NotJsonAndBadLatest) {
  std::ofstream(step_dir_ / "manifest.json") << "{\"format\": ";
  expect_open_fails("does not match its digest");
  fs::remove(step_dir_ / "manifest.json.sha256");  // as written before digests: parsed strictly all the same
  expect_open_fails("not valid JSON");
  std::ofstream(root_.path() / "latest") << "../../etc";
  expect_open_fails("not a step-NNNNNNNN directory name");
}

TEST_F(Damage, ExpectReportsShapeAndDtypeMismatch) {
  const CheckpointReader r = CheckpointReader::open(root_.str());
  try {
    r.expect("a.weight", Shape{10, 6}, DType::F32);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("shape mismatch"), std::string::npos) << e.what();
  }
  try {
    r.expect("a.weight", Shape{6, 10}, DType::BF16);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("dtype mismatch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshtrain::checkpoint
