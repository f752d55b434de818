#include <gtest/gtest.h>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/comm/launch.h"

namespace meshtrain::checkpoint {
namespace {

using testing::Partition;
using testing::ScratchDir;

// Saves make_state(step) from `world` ranks partitioned by `how`.
std::string save_state(const std::string& root, int64_t step, int world, Partition how, const SaveOptions& opts = {}) {
  const auto state = testing::make_state(step);
  std::vector<std::string> dirs(static_cast<size_t>(world));
  comm::launch_threads(world, [&](comm::ParallelContext& ctx) {
    std::vector<std::vector<char>> storage;
    const SaveRequest req = testing::make_request(state, step, how, world, ctx.rank, storage);
    dirs[size_t(ctx.rank)] = save_checkpoint(*ctx.world, root, req, opts);
  });
  for (const auto& d : dirs) EXPECT_EQ(d, dirs[0]);
  return dirs[0];
}

// Every rank of the target layout reads its own boxes; compares bitwise.
void check_load(const std::string& path, int64_t step, int world, Partition how) {
  const auto state = testing::make_state(step);
  const CheckpointReader r = CheckpointReader::open(path);
  EXPECT_EQ(r.step(), step);
  EXPECT_EQ(r.metadata()["step"], step);
  comm::launch_threads(world, [&](comm::ParallelContext& ctx) {
    for (const auto& t : state) {
      r.expect(t.name, t.shape, t.dtype);
      for (const Box& b : testing::owned_boxes(t.shape, how, world, ctx.rank)) {
        std::vector<char> got(size_t(b.numel()) * dtype_size(t.dtype), 0x5a);
        r.read(t.name, b, got.data(), t.dtype);
        ASSERT_EQ(got, testing::extract(t, b)) << t.name << " box " << b.str() << " rank " << ctx.rank;
      }
    }
  });
}

TEST(SaveLoad, EveryWorldSizeAndPartitionReloadsBitwiseUnderAnother) {
  const Partition parts[] = {Partition::Flat, Partition::Dim0, Partition::LastDim, Partition::Owner0};
  int64_t step = 1;
  for (int world : {1, 2, 4})
    for (Partition save_how : parts) {
      ScratchDir dir;
      const std::string saved = save_state(dir.str(), step, world, save_how);
      EXPECT_EQ(saved, (dir.path() / step_dir_name(step)).string());
      for (int load_world : {1, 2, 4})
        for (Partition load_how : {Partition::Flat, Partition::LastDim}) check_load(dir.str(), step, load_world, load_how);
      ++step;
    }
}

TEST(SaveLoad, ReadSpansPiecesOfSeveralRanks) {
  ScratchDir dir;
  save_state(dir.str(), 3, 4, Partition::Flat);
  const CheckpointReader r = CheckpointReader::open(dir.str());
  const auto& a = r.tensor("a.weight");
  EXPECT_GE(a.pieces.size(), 4u);
  std::set<std::string> files;
  for (const auto& p : a.pieces) files.insert(p.file);
  EXPECT_EQ(files.size(), 4u);
  const auto t = testing::make_tensor("a.weight", Shape{6, 10}, DType::F32, 3);
  const Box column{{0, 3}, {6, 2}};  // crosses every rank's flat range
  std::vector<char> got(6 * 2 * 4);
  r.read("a.weight", column, got.data(), DType::F32);
  EXPECT_EQ(got, testing::extract(t, column));
  // Flat range through the middle.
  std::vector<float> flat(37);
  r.read_flat("a.weight", 11, 48, flat.data(), DType::F32);
  EXPECT_EQ(0, std::memcmp(flat.data(), t.bytes.data() + 11 * 4, 37 * 4));
}

TEST(SaveLoad, ReadConvertsFloatDtypes) {
  ScratchDir dir;
  save_state(dir.str(), 5, 2, Partition::Dim0);
  const CheckpointReader r = CheckpointReader::open(dir.str());
  const auto t = testing::make_tensor("b.bias", Shape{7}, DType::BF16, 5);
  std::vector<float> f(7);
  r.read_all("b.bias", f.data(), DType::F32);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(f[size_t(i)], float(reinterpret_cast<const bf16*>(t.bytes.data())[i]));
  std::vector<int32_t> bad(7);
  EXPECT_THROW(r.read_all("b.bias", bad.data(), DType::I32), CheckpointError);
}

TEST(SaveLoad, LatestFollowsTheNewestSaveAndManifestHasTheContract) {
  ScratchDir dir;
  save_state(dir.str(), 10, 2, Partition::Flat);
  save_state(dir.str(), 20, 2, Partition::Flat);
  EXPECT_EQ(CheckpointReader::open(dir.str()).step(), 20);
  EXPECT_EQ(CheckpointReader::open((dir.path() / "step-00000010").string()).step(), 10);
  const auto m = testing::read_json(dir.path() / "step-00000020" / "manifest.json");
  EXPECT_EQ(m["format_version"], kFormatVersion);
  EXPECT_EQ(m["metadata"]["note"], "test");
  const auto& piece = m["tensors"][0]["pieces"][0];
  for (const char* k : {"offset", "length", "file", "byte_offset", "byte_length", "sha256"}) EXPECT_TRUE(piece.contains(k));
}

TEST(SaveLoad, BadPartitionFailsAtSaveTimeOnEveryRank) {
  ScratchDir dir;
  const auto state = testing::make_state(1);
  std::vector<std::string> errors(2);
  comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
    std::vector<std::vector<char>> storage;
    // Both ranks save everything: every element twice.
    const SaveRequest req = testing::make_request(state, 1, Partition::Owner0, 1, 0, storage);
    try {
      save_checkpoint(*ctx.world, dir.str(), req);
    } catch (const CheckpointError& e) {
      errors[size_t(ctx.rank)] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("overlap"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_FALSE(fs::exists(dir.path() / "latest"));
  EXPECT_TRUE(list_complete_checkpoints(dir.path()).empty());
}

TEST(Retention, KeepsLastKAndNeverTheJustWrittenOneAndCleansStaleTmp) {
  ScratchDir dir;
  SaveOptions opts;
  opts.keep_last = 2;
  for (int64_t s = 1; s <= 5; ++s) save_state(dir.str(), s, 2, Partition::Flat, opts);
  auto steps = [&] {
    std::vector<int64_t> out;
    for (const auto& [s, p] : list_complete_checkpoints(dir.path())) out.push_back(s);
    return out;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{4, 5}));
  // A resumed run saving an older step keeps it (it is what `latest` names).
  save_state(dir.str(), 3, 2, Partition::Flat, opts);
  EXPECT_EQ(CheckpointReader::open(dir.str()).step(), 3);
  EXPECT_EQ(steps(), (std::vector<int64_t>{3, 4, 5}));
  opts.keep_last = 1;
  save_state(dir.str(), 6, 1, Partition::Flat, opts);
  EXPECT_EQ(steps(), (std::vector<int64_t>{6}));
  // A crashed save's leftovers disappear with the next save.
  fs::create_directories(dir.path() / ".tmp-step-00000099");
  std::ofstream(dir.path() / ".tmp-step-00000099" / "rank-00000.bin") << "partial";
  save_state(dir.str(), 7, 2, Partition::Flat, opts);
  EXPECT_FALSE(fs::exists(dir.path() / ".tmp-step-00000099"));
  EXPECT_EQ(steps(), (std::vector<int64_t>{7}));
}

TEST(SaveLoad, SavingTheSameStepAgainReplacesIt) {
  ScratchDir dir;
  save_state(dir.str(), 4, 2, Partition::Flat);
  save_state(dir.str(), 4, 4, Partition::Dim0);
  EXPECT_EQ(CheckpointReader::open(dir.str()).manifest().world_size, 4);
  check_load(dir.str(), 4, 2, Partition::Flat);
}

}  // namespace
}  // namespace meshtrain::checkpoint
