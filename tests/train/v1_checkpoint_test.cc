// A checkpoint written before parameter placements existed (flat-range
// ZeRO pieces, layout tp = pp = 1 hard-coded; tests/fixtures/v1_checkpoint)
// still loads, and resuming it continues bit for bit: steps 3-4 reproduce
// every piece digest of the recorded step-4 manifest, where the kernel ISA
// level, CPU and GEMM library are the ones that wrote it (bits depend on
// them; tests/fixtures/v1_checkpoint/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/train/run.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(V1Checkpoint, ResumesBitwiseUnderTheLayoutThatWroteIt) {
  const fs::path fixture = fs::path(MESHTRAIN_FIXTURES) / "v1_checkpoint";
  const fs::path work = fs::temp_directory_path() / ("mt-v1-ckpt-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  fs::copy(fixture / "checkpoints", work / "checkpoints", fs::copy_options::recursive);
  fs::copy(fixture / "data", work / "data", fs::copy_options::recursive);

  const train::TrainConfig cfg = train::load_config(
      (fixture / "tiny.toml").string(),
      {"data.path=\"" + (work / "data").string() + "\"", "metrics.run_dir=\"" + work.string() + "\"",
       "data.sources=[]"});
  train::train_main(cfg);

  const auto old = checkpoint::parse_manifest(read_file(fixture / "step4_manifest.json"), "step4_manifest.json");
  const auto now = checkpoint::CheckpointReader::open((work / "checkpoints").string());
  EXPECT_EQ(now.step(), 4);
  ASSERT_EQ(now.manifest().tensors.size(), old.tensors.size());
  const auto writer = nlohmann::json::parse(read_file(fixture / "step4_written_by.json"));
  // "gemm" lists every GEMM that was checked to give the recorded bits.
  const nlohmann::json here = {{"cpu", kernels::cpu_model_name()},
                               {"gemm", kernels::gemm_description()},
                               {"kernel_isa", kernels::isa_name(kernels::active_isa())}};
  const nlohmann::json& gemms = writer.at("gemm");
  const bool same_bits_expected = writer.at("cpu") == here.at("cpu") && writer.at("kernel_isa") == here.at("kernel_isa") &&
                                  std::find(gemms.begin(), gemms.end(), here.at("gemm")) != gemms.end();
  if (!same_bits_expected)
    std::cout << "[ NOTE ] step-4 digests were written by " << writer.dump() << ", this run is " << here.dump()
              << ": bits not compared\n";
  for (const auto& t : old.tensors) {
    const checkpoint::TensorEntry& mine = now.tensor(t.name);
    ASSERT_EQ(mine.pieces.size(), t.pieces.size()) << t.name;
    for (size_t i = 0; i < t.pieces.size(); ++i) {
      EXPECT_EQ(mine.pieces[i].box, t.pieces[i].box) << t.name;
      if (same_bits_expected) {
        EXPECT_EQ(mine.pieces[i].sha256, t.pieces[i].sha256) << t.name << " piece " << i << " differs from the old bits";
      }
    }
  }
  // It resumed (a fresh run would reach the same bits too): only steps 3
  // and 4 ran.
  std::vector<int64_t> steps;
  std::istringstream metrics(read_file(work / "metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("event") && j.contains("step")) steps.push_back(j.at("step").get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 4}));
  // The new manifest records the whole mesh.
  EXPECT_EQ(now.metadata().at("layout").at("cp"), 1);
  fs::remove_all(work);
}
