// Covers src/meshtrain/plan/mesh_search.cc (--devices) and plan/plan_report.cc (text and --json).
// `meshtrain plan` and `meshtrain bench machine` through the command line
// (cli::run): the config mode (table, prediction, JSON, hardware, mesh
// listing), the config-free mode, and bad input named in the error (usage
// errors exit 2, failures exit 1).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/machine_bench.h"

using namespace meshtrain;
using namespace meshtrain::cli::testing;

namespace {

const char* kConfig =
    "[model]\nvocab_size = 259\nd_model = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\nffn_hidden = 64\n"
    "max_seq_len = 32\n[data]\npath = \"x\"\nseq_len = 32\n[training]\nmicro_batch = 2\ngrad_accum = 2\n";

const char* kPlanUsage = "meshtrain plan [OPTIONS] [CONFIG]";

std::string hardware() { return std::string(MESHTRAIN_HARDWARE_DIR) + "/a100-80gb.toml"; }

std::string printed(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"plan"};
  all.insert(all.end(), args.begin(), args.end());
  const Result r = run_cli(all);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.out;
}

std::string config(const TempDir& dir) {
  write_file(dir / "plan.toml", kConfig);
  return dir / "plan.toml";
}

}  // namespace

TEST(PlanCli, ConfigModePrintsTableAndPrediction) {
  TempDir dir;
  const std::string cfg = config(dir);
  const std::string out = printed({cfg, "--layout", "dp=2,zero=3", "--hardware", hardware()});
  for (const char* want : {"model.embed_tokens.weight", "memory per rank class", "ZeRO-3: largest gathered unit",
                           "reduce_scatter", "all_gather", "FLOPs per step", "predicted step on A100", "MFU", "fits"})
    EXPECT_TRUE(contains(out, want)) << want << " in\n" << out;
  const nlohmann::json j = nlohmann::json::parse(printed({cfg, "--layout", "dp=2,zero=1", "--json"}));
  EXPECT_EQ(j["layout"]["dp"], 2);
  EXPECT_EQ(j["rank_classes"].size(), 1u);
  EXPECT_EQ(j["rank_classes"][0]["count"], 2);
  EXPECT_GT(j["rank_classes"][0]["peak"]["activations"].get<int64_t>(), 0);
  EXPECT_FALSE(j.contains("time"));  // no --hardware, no step time
}

// The config's own tensor, sequence and pipeline split is planned and
// predicted per rank class (every pipeline stage is a class of its own).
TEST(PlanCli, ConfigLayoutWithTensorSequenceAndPipelineAxes) {
  TempDir dir;
  const std::string cfg = config(dir);
  const std::string out = printed({cfg, "--set", "parallel.tp=2", "--set", "parallel.sequence_parallel=true",
                                   "--set", "parallel.pp=2", "--set", "parallel.schedule=gpipe"});
  EXPECT_TRUE(contains(out, "pipeline stages")) << out;
  EXPECT_TRUE(contains(out, "memory per rank class")) << out;
  // Every layout is the trainer's own step on the meta device
  // (tests/plan/validation_test.cc checks it against real steps).
  EXPECT_TRUE(contains(out, "recorded: every memory category")) << out;
  const std::string cp = printed({cfg, "--layout", "tp=2,sp=on,cp=2"});
  EXPECT_TRUE(contains(cp, "recorded: every memory category")) << cp;
  EXPECT_FALSE(contains(cp, "assumes")) << cp;
  const nlohmann::json j = nlohmann::json::parse(printed({cfg, "--layout", "tp=2,sp=on,pp=2,schedule=gpipe", "--json"}));
  EXPECT_EQ(j["layout"]["tp"], 2);
  EXPECT_EQ(j["layout"]["pp"], 2);
  EXPECT_TRUE(j["assumptions"].empty());
  // Per stage, each tensor-parallel rank: 259 vocabulary rows split 130 + 129.
  EXPECT_EQ(j["rank_classes"].size(), 4u);
}

TEST(PlanCli, DevicesListsEveryMesh) {
  TempDir dir;
  const std::string out = printed({config(dir), "--devices", "4", "--hardware", hardware()});
  for (const char* want : {"pp=1 dp=4 cp=1 tp=1", "pp=2 dp=2 cp=1 tp=1", "pp=1 dp=1 cp=1 tp=4", "pp=1 dp=2 cp=1 tp=2",
                           "tp {0,1}"})
    EXPECT_TRUE(contains(out, want)) << want << " in\n" << out;
  // Context parallelism is searched too where the rows split into 2 cp chunks.
  EXPECT_TRUE(contains(out, "pp=1 dp=2 cp=2 tp=1")) << out;
  // pp = 4 has more stages than blocks.
  EXPECT_TRUE(contains(out, "cannot run")) << out;
}

// --nodes: the devices split over nodes; a tp group across them is listed
// and marked, the placement printed, and a node count that does not divide
// the devices (or a mode without a config) named.
TEST(PlanCli, NodesMarkGroupsAcrossNodes) {
  TempDir dir;
  const std::string cfg = config(dir);
  const std::string listed = printed({cfg, "--devices", "4", "--nodes", "2", "--hardware", hardware()});
  EXPECT_TRUE(contains(listed, "on 2 node(s) of 2 ranks")) << listed;
  EXPECT_TRUE(contains(listed, "tp {0,1,2,3}; tp across nodes")) << listed;
  EXPECT_TRUE(contains(listed, "dp {0,2} tp {0,1}\n")) << listed;  // tp inside: no mark
  const std::string one = printed({cfg, "--layout", "tp=4", "--nodes", "2", "--hardware", hardware()});
  EXPECT_TRUE(contains(one, "placement: 2 node(s) x 2 ranks")) << one;
  EXPECT_TRUE(contains(one, "tp ACROSS NODES")) << one;
  EXPECT_FALSE(contains(printed({cfg, "--layout", "tp=4", "--hardware", hardware()}), "placement:"));
  const nlohmann::json j =
      nlohmann::json::parse(printed({cfg, "--layout", "pp=2,dp=2", "--nodes", "2", "--json"}));
  EXPECT_EQ(j["placement"]["ranks_per_node"], 2);
  EXPECT_EQ(j["placement"]["groups_across_nodes"], nlohmann::json::array({"pp"}));
  expect_failure({"plan", cfg, "--devices", "4", "--nodes", "3"}, "--nodes 3");
  expect_failure({"plan", cfg, "--layout", "dp=4", "--nodes", "3"}, "--nodes 3");
  expect_failure({"plan", "--published", "megatron-2021", "--hardware", hardware(), "--nodes", "2"}, "--nodes 2");
  expect_usage_error({"plan", cfg, "--nodes", "0"}, "--nodes", kPlanUsage);
}

TEST(PlanCli, ConfigFreeWorkedExample) {
  const std::string out = printed({"--params", "6442450944", "--precision", "bf16", "--layout", "dp=8,zero=3",
                                   "--activations", "10GiB", "--workspace", "6GiB", "--gathered", "4GiB",
                                   "--prefetch", "4GiB", "--device-memory", "80GiB"});
  for (const char* want : {"96.00 GiB", "33.00 GiB", "22.50 GiB", "12.00 GiB", "= 36.00 GiB", "fits"})
    EXPECT_TRUE(contains(out, want)) << want << " in\n" << out;
  EXPECT_TRUE(contains(printed({"--scaling", "100,8,60,16"}), "83.3%"));
  EXPECT_TRUE(contains(printed({"--pp", "4", "--target-bubble", "0.273"}), "smallest m = 8"));
  EXPECT_TRUE(contains(printed({"--recompute-layers", "16", "--activation-unit", "1GiB"}), "best k = 4"));
  EXPECT_TRUE(contains(printed({"--params", "7B", "--precision", "fp32"}), "7e+09 parameters"));
}

TEST(PlanCli, BadInputIsNamed) {
  TempDir dir;
  const std::string cfg = config(dir);
  // A layout that does not multiply to the device count.
  expect_failure({"plan", cfg, "--layout", "pp=2,dp=3", "--devices", "8"}, "= 6 devices but --devices is 8");
  expect_failure({"plan", "--params", "1e9", "--layout", "dp=3", "--devices", "4"}, "--devices is 4");
  // Negative or malformed sizes and counts: usage errors naming the option.
  expect_usage_error({"plan", "--params", "1e9", "--activations=-1GiB"}, "--activations", kPlanUsage);
  expect_usage_error({"plan", "--params", "1e9", "--activations=-1GiB"}, "negative", kPlanUsage);
  expect_usage_error({"plan", "--params=-5"}, "--params", kPlanUsage);
  expect_usage_error({"plan", "--params", "7X"}, "unknown suffix", kPlanUsage);
  expect_usage_error({"plan", "--precision", "fp8"}, "fp8", kPlanUsage);
  expect_usage_error({"plan", cfg, "--bogus"}, "--bogus", kPlanUsage);
  expect_failure({"plan", "--scaling", "1,2,3"}, "expected four values");
  // A hardware file missing a field: the file and the key.
  std::string text = read_file(hardware());
  const size_t at = text.find("memory_bandwidth_gbps");
  ASSERT_NE(at, std::string::npos);
  text.erase(at, text.find('\n', at) - at);
  write_file(dir / "broken.toml", text);
  expect_failure({"plan", cfg, "--hardware", dir / "broken.toml"}, dir / "broken.toml");
  expect_failure({"plan", cfg, "--hardware", dir / "broken.toml"}, "device.memory_bandwidth_gbps");
  expect_failure({"plan", cfg, "--hardware", dir / "none.toml"}, "cannot open");
  expect_failure({"plan", "--devices", "4"}, "give a CONFIG");
  expect_failure({"plan", "--published", "megatron-2021"}, "needs --hardware");
}

// A profile written by the machine benchmark reads back with every field
// (small sizes: the figures are not the point here).
TEST(PlanCli, BenchMachineWritesAReadableProfile) {
  plan::MachineBenchOptions o;
  o.max_bytes = 256 << 10;
  o.iters = 1;
  o.seconds_per_gemm = 0.01;
  const plan::HardwareProfile hw = plan::parse_hardware(plan::bench_machine(o), "bench");
  EXPECT_TRUE(hw.shared_node);
  EXPECT_GT(hw.peak(DType::F32), 0);
  EXPECT_GT(hw.gemm_rate(DType::BF16, 1024, 1024, 1024), 0);
  EXPECT_GT(hw.intra.for_op(comm::OpKind::AllReduce).bytes_per_s, 0);
  EXPECT_TRUE(hw.intra.per_op.count(comm::OpKind::Send));
  // One machine, one node: the inter-node figures repeat the intra-node ones.
  EXPECT_EQ(hw.inter.for_op(comm::OpKind::Send).bytes_per_s, hw.intra.for_op(comm::OpKind::Send).bytes_per_s);
  EXPECT_FALSE(hw.inter.whole_nodes);
  EXPECT_GT(hw.memory_bytes_per_s, 0);
  expect_usage_error({"bench", "machine", "--max-bytes", "lots"}, "lots", "meshtrain bench machine [OPTIONS]");
}
