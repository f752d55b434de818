// The peak MFU divides by (train/peak_flops.h): measured once and cached per
// CPU, ISA, GEMM, dtype and busy cores; refreshed on request; raised to at
// least any rate a step reached; the cores a job computes on.
#include "meshtrain/train/peak_flops.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/scoped_env.h"
#include "train/train_fixtures.h"

namespace meshtrain::train {
namespace {

namespace fs = std::filesystem;

class PeakCache : public ::testing::Test {
 protected:
  nlohmann::json cache() const {
    std::ifstream in(dir_ / "meshtrain" / "peak_flops.json");
    return nlohmann::json::parse(in);
  }
  const fs::path dir_ = testing::fresh_dir("peak_cache");
  const testing::ScopedEnv env_{"XDG_CACHE_HOME", dir_.c_str()};
};

TEST_F(PeakCache, MeasuredOnceThenReadFromTheCache) {
  EXPECT_EQ(peak_cache_path(), (dir_ / "meshtrain" / "peak_flops.json").string());
  const PeakFlops first = peak_flops(DType::F32, 3, 1);
  EXPECT_GT(first.per_core, 1e8) << "a core does more than 0.1 GFLOP/s";
  EXPECT_EQ(first.cores, 3);
  EXPECT_DOUBLE_EQ(first.total(), 3 * first.per_core);
  EXPECT_EQ(first.origin.rfind("measured now", 0), 0u) << first.origin;
  const std::string key = peak_key(DType::F32, 1);
  EXPECT_NE(key.find("f32 | 1 core"), std::string::npos) << key;
  EXPECT_DOUBLE_EQ(cache()["peaks"][key]["per_core_flops"].get<double>(), first.per_core);

  // The next run reads it: the same figure, however busy the machine is now.
  const PeakFlops again = peak_flops(DType::F32, 2, 1);
  EXPECT_DOUBLE_EQ(again.per_core, first.per_core);
  EXPECT_EQ(again.origin.rfind("cached in", 0), 0u) << again.origin;
  // Another dtype or core count is another entry.
  EXPECT_NE(peak_key(DType::BF16, 1), key);
  EXPECT_NE(peak_key(DType::F32, 2), key);

  // Refresh (`meshtrain bench peak`) measures again and replaces the entry.
  nlohmann::json j = cache();
  j["peaks"][key]["per_core_flops"] = 5.0;
  std::ofstream(dir_ / "meshtrain" / "peak_flops.json") << j.dump();
  EXPECT_DOUBLE_EQ(peak_flops(DType::F32, 1, 1).per_core, 5.0) << "the cache is what it says";
  const PeakFlops fresh = peak_flops(DType::F32, 1, 1, /*refresh=*/true);
  EXPECT_GT(fresh.per_core, 1e8);
  EXPECT_DOUBLE_EQ(cache()["peaks"][key]["per_core_flops"].get<double>(), fresh.per_core);

  // A broken cache file is measured over, not an error.
  std::ofstream(dir_ / "meshtrain" / "peak_flops.json") << "{not json";
  EXPECT_GT(peak_flops(DType::F32, 1, 1).per_core, 1e8);
}

TEST_F(PeakCache, ARateAboveThePeakRaisesIt) {
  PeakFlops low;
  low.per_core = 1.0;  // a figure measured on a machine busy with something else
  low.cores = 2;
  // A step at 1e15 FLOP/s on 2 cores is faster than any measurement here:
  // the peak becomes the step's own rate, so its MFU is exactly 100%.
  const PeakFlops raised = raise_peak(low, 1, 1e15, 7);
  EXPECT_DOUBLE_EQ(raised.per_core, 0.5e15);
  EXPECT_DOUBLE_EQ(raised.total(), 1e15);
  EXPECT_NE(raised.origin.find("raised at step 7"), std::string::npos) << raised.origin;
  EXPECT_DOUBLE_EQ(cache()["peaks"][peak_key(DType::F32, 1)]["per_core_flops"].get<double>(), 0.5e15)
      << "the next run starts from it";
  // A step just above a low peak: measured again, which is higher still.
  const PeakFlops remeasured = raise_peak(low, 1, 4.0, 8);
  EXPECT_GT(remeasured.per_core, 1e8);
  EXPECT_NE(remeasured.origin.find("measured again"), std::string::npos) << remeasured.origin;
}

TEST(PeakFlopsCores, EveryRanksThreadsCappedByTheSharedCores) {
  EXPECT_EQ(job_cores(true, 2, 1, 2), 2);
  EXPECT_EQ(job_cores(true, 4, 1, 2), 2) << "threads backend: 4 ranks share 2 cores";
  EXPECT_EQ(job_cores(true, 1, 8, 64), 8);
  EXPECT_EQ(job_cores(false, 4, 2, 1), 8) << "mpirun: each rank on cores of its own";
  EXPECT_EQ(job_cores(true, 0, 0, 0), 1);
}

}  // namespace
}  // namespace meshtrain::train
