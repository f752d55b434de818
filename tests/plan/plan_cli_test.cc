// `meshtrain plan` and `meshtrain bench machine` through their command
// functions: the config mode (table, prediction, JSON, hardware, mesh
// listing), the config-free mode, and bad input named in the error.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/machine_bench.h"

using namespace meshtrain;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/plan_cli_" + name;
  std::ofstream(path) << text;
  return path;
}

std::string printed(const cli::Args& args) {
  ::testing::internal::CaptureStdout();
  try {
    EXPECT_EQ(cli::cmd_plan(args), 0);
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  return ::testing::internal::GetCapturedStdout();
}

std::string error_of(const cli::Args& args) {
  try {
    printed(args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const char* kConfig =
    "[model]\nvocab_size = 259\nd_model = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\nffn_hidden = 64\n"
    "max_seq_len = 32\n[data]\npath = \"x\"\nseq_len = 32\n[training]\nmicro_batch = 2\ngrad_accum = 2\n";

std::string hardware() { return std::string(MESHTRAIN_HARDWARE_DIR) + "/a100-80gb.toml"; }

}  // namespace

TEST(PlanCli, ConfigModePrintsTableAndPrediction) {
  const std::string cfg = temp_file("a.toml", kConfig);
  const std::string out = printed({cfg, "--layout", "dp=2,zero=3", "--hardware", hardware()});
  for (const char* want : {"model.embed_tokens.weight", "memory per rank class", "ZeRO-3: largest gathered unit",
                           "reduce_scatter", "all_gather", "FLOPs per step", "predicted step on A100", "MFU", "fits"})
    EXPECT_NE(out.find(want), std::string::npos) << want << " in\n" << out;
  const nlohmann::json j = nlohmann::json::parse(printed({cfg, "--layout", "dp=2,zero=1", "--json"}));
  EXPECT_EQ(j["layout"]["dp"], 2);
  EXPECT_EQ(j["rank_classes"].size(), 1u);
  EXPECT_EQ(j["rank_classes"][0]["count"], 2);
  EXPECT_GT(j["rank_classes"][0]["peak"]["activations"].get<int64_t>(), 0);
  EXPECT_FALSE(j.contains("time"));  // no --hardware, no step time
}

TEST(PlanCli, DevicesListsEveryMesh) {
  const std::string cfg = temp_file("b.toml", kConfig);
  const std::string out = printed({cfg, "--devices", "4", "--hardware", hardware()});
  for (const char* want : {"pp=1 dp=4 tp=1", "pp=2 dp=2 tp=1", "pp=1 dp=1 tp=4", "pp=1 dp=2 tp=2", "tp {0,1}"})
    EXPECT_NE(out.find(want), std::string::npos) << want << " in\n" << out;
  // tp = 4 splits 4 query heads but not 2 KV heads... it does (shared); pp = 4 has more stages than blocks.
  EXPECT_NE(out.find("cannot run"), std::string::npos) << out;
}

TEST(PlanCli, ConfigFreeWorkedExample) {
  const std::string out = printed({"--params", "6442450944", "--precision", "bf16", "--layout", "dp=8,zero=3",
                                   "--activations", "10GiB", "--workspace", "6GiB", "--gathered", "4GiB",
                                   "--prefetch", "4GiB", "--device-memory", "80GiB"});
  for (const char* want : {"96.00 GiB", "33.00 GiB", "22.50 GiB", "12.00 GiB", "= 36.00 GiB", "fits"})
    EXPECT_NE(out.find(want), std::string::npos) << want << " in\n" << out;
  EXPECT_NE(printed({"--scaling", "100,8,60,16"}).find("83.3%"), std::string::npos);
  EXPECT_NE(printed({"--pp", "4", "--target-bubble", "0.273"}).find("smallest m = 8"), std::string::npos);
  EXPECT_NE(printed({"--recompute-layers", "16", "--activation-unit", "1GiB"}).find("best k = 4"), std::string::npos);
}

TEST(PlanCli, BadInputIsNamed) {
  const std::string cfg = temp_file("c.toml", kConfig);
  // A layout that does not multiply to the device count.
  const std::string mult = error_of({cfg, "--layout", "pp=2,dp=3", "--devices", "8"});
  EXPECT_NE(mult.find("= 6 devices but --devices is 8"), std::string::npos) << mult;
  EXPECT_NE(error_of({"--params", "1e9", "--layout", "dp=3", "--devices", "4"}).find("--devices is 4"),
            std::string::npos);
  // Negative sizes.
  EXPECT_NE(error_of({"--params", "1e9", "--activations", "-1GiB"}).find("--activations"), std::string::npos);
  EXPECT_NE(error_of({"--params", "1e9", "--activations", "-1GiB"}).find("negative"), std::string::npos);
  EXPECT_NE(error_of({"--params", "-5"}).find("--params"), std::string::npos);
  EXPECT_NE(error_of({"--params", "7X"}).find("unknown suffix"), std::string::npos);
  EXPECT_NE(printed({"--params", "7B", "--precision", "fp32"}).find("7e+09 parameters"), std::string::npos);
  // A hardware file missing a field: the file and the key.
  std::ifstream in(hardware());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("memory_bandwidth_gbps");
  text.erase(at, text.find('\n', at) - at);
  const std::string broken = temp_file("broken.toml", text);
  const std::string missing = error_of({cfg, "--hardware", broken});
  EXPECT_NE(missing.find(broken), std::string::npos) << missing;
  EXPECT_NE(missing.find("device.memory_bandwidth_gbps"), std::string::npos) << missing;
  EXPECT_NE(error_of({cfg, "--hardware", "/nonexistent.toml"}).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of({cfg, "--bogus"}).find("unknown option '--bogus'"), std::string::npos);
  EXPECT_NE(error_of({"--devices", "4"}).find("give a CONFIG"), std::string::npos);
}

// A profile written by the machine benchmark reads back with every field
// (small sizes: the figures are not the point here).
TEST(PlanCli, BenchMachineWritesAReadableProfile) {
  plan::MachineBenchOptions o;
  o.max_bytes = 64 << 10;
  o.iters = 1;
  o.seconds_per_gemm = 0.01;
  const plan::HardwareProfile hw = plan::parse_hardware(plan::bench_machine(o), "bench");
  EXPECT_TRUE(hw.shared_node);
  EXPECT_GT(hw.peak(DType::F32), 0);
  EXPECT_GT(hw.gemm_rate(DType::BF16, 1024, 1024, 1024), 0);
  EXPECT_GT(hw.intra.for_op(comm::OpKind::AllReduce).bytes_per_s, 0);
  EXPECT_GT(hw.memory_bytes_per_s, 0);
}
