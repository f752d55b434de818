// The subcommands of the meshtrain executable (commands.h): argument
// handling of bench_command, ckpt_command, data_command, generate_command,
// train_command and verify_command, version_string() (version.cc), and one
// cheap positive path each: data prepare + inspect, ckpt inspect / verify /
// diff on a checkpoint saved here, train for 2 steps of a tiny model, then
// generate from its checkpoint and verify with a bad layout.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/cli/commands.h"
#include "meshtrain/comm/thread_world.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "/mt_cli_XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Expects fn to throw E whose message contains every needle.
template <typename E = ConfigError>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << needles.front() << "'";
  } catch (const E& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// Runs fn with stdout captured; returns what it printed.
std::string stdout_of(const std::function<void()>& fn) {
  ::testing::internal::CaptureStdout();
  try {
    fn();
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  return ::testing::internal::GetCapturedStdout();
}

TEST(CliVersion, StartsWithTheProgramName) {
  const std::string v = version_string();
  EXPECT_EQ(v.rfind("meshtrain ", 0), 0u) << v;
  EXPECT_GT(v.size(), std::string("meshtrain ").size()) << "a version number follows";
}

// ---- train_command.cc ----------------------------------------------------------

TEST(CliTrain, ArgumentErrors) {
  expect_error([] { cmd_train({}); }, {"usage: meshtrain train CONFIG.toml"});
  expect_error([] { cmd_train({"a.toml", "--bogus"}); }, {"unknown option '--bogus'"});
  expect_error([] { cmd_train({"a.toml", "--set"}); }, {"--set needs section.key=value"});
  expect_error([] { cmd_train({"a.toml", "b.toml"}); }, {"more than one config file", "'a.toml'", "'b.toml'"});
  TempDir dir;
  expect_error([&] { cmd_train({dir / "missing.toml"}); }, {"cannot read config file", "missing.toml"});
  write_file(dir / "c.toml", "[model]\nd_model = 16\n[data]\npath = \"x\"\n");
  expect_error([&] { cmd_train({dir / "c.toml", "--set", "model.no_such_key=1"}); }, {"no_such_key"});
  expect_error([&] { cmd_train({dir / "c.toml", "--set=training.steps=-1"}); }, {"training.steps"});
}

// ---- bench_command.cc ----------------------------------------------------------

TEST(CliBench, ArgumentErrors) {
  expect_error([] { cmd_bench({}); }, {"usage: meshtrain bench comm"});
  expect_error([] { cmd_bench({"gpu"}); }, {"usage: meshtrain bench comm"});
  expect_error([] { cmd_bench({"comm", "--ops", "all_reduce,gossip"}); }, {"unknown op 'gossip'"});
  expect_error([] { cmd_bench({"comm", "--turbo"}); }, {"unknown flag '--turbo'"});
  expect_error([] { cmd_bench({"comm", "--ranks"}); }, {"missing value after --ranks"});
  expect_error([] { cmd_bench({"comm", "--backend", "nccl"}); }, {"nccl"});
}

// ---- data_command.cc -----------------------------------------------------------

TEST(CliData, ArgumentErrors) {
  TempDir dir;
  write_file(dir / "a.txt", "hello");
  expect_error([] { cmd_data({}); }, {"missing subcommand", "usage: meshtrain data"});
  expect_error([] { cmd_data({"shuffle"}); }, {"unknown subcommand 'shuffle'"});
  expect_error([&] { cmd_data({"prepare", dir / "a.txt"}); }, {"prepare needs --out DIR"});
  expect_error([&] { cmd_data({"prepare", "--out", dir / "o"}); }, {"needs at least one INPUT"});
  expect_error([&] { cmd_data({"prepare", "--out", dir / "o", "--val-fraction", "half", dir / "a.txt"}); },
               {"--val-fraction expects a number, got 'half'"});
  expect_error([&] { cmd_data({"prepare", dir / "a.txt", "--out"}); }, {"--out needs a value"});
  expect_error([&] { cmd_data({"inspect"}); }, {"inspect takes exactly one DIR"});
  expect_error([&] { cmd_data({"inspect", "--all"}); }, {"unknown flag '--all'"});
  EXPECT_FALSE(fs::exists(dir / "o"));
}

TEST(CliData, PrepareThenInspect) {
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 30; ++i) corpus += "Saying number " + std::to_string(i) + " is short.\n%\n";
  write_file(dir / "sayings", corpus);
  const std::string out = stdout_of([&] {
    EXPECT_EQ(cmd_data({"prepare", "--out=" + dir / "ds", "--format", "fortune", "--seed", "3", "--val-fraction",
                        "0.2", dir / "sayings"}),
              0);
  });
  EXPECT_NE(out.find("from 1 file(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("documents 30 ("), std::string::npos) << out;
  const std::string info = stdout_of([&] { EXPECT_EQ(cmd_data({"inspect", dir / "ds"}), 0); });
  EXPECT_NE(info.find("train: "), std::string::npos) << info;
  EXPECT_NE(info.find("val: "), std::string::npos) << info;
  EXPECT_NE(info.find("unigram entropy"), std::string::npos) << info;
  // Preparing into an existing dataset needs --overwrite.
  EXPECT_THROW(stdout_of([&] { cmd_data({"prepare", "--out", dir / "ds", dir / "sayings"}); }), Error);
  const std::string again = stdout_of([&] {
    EXPECT_EQ(cmd_data({"prepare", "--overwrite", "--out", dir / "ds", "--", dir / "sayings"}), 0);
  });
  EXPECT_NE(again.find("documents 30"), std::string::npos) << again;
}

// ---- ckpt_command.cc -----------------------------------------------------------

TEST(CliCkpt, ArgumentErrors) {
  expect_error([] { cmd_ckpt({}); }, {"ckpt: missing subcommand", "usage: meshtrain ckpt"});
  expect_error([] { cmd_ckpt({"shrink", "d"}); }, {"unknown subcommand 'shrink'"});
  expect_error([] { cmd_ckpt({"export", "d"}); }, {"export needs --out"});
  expect_error([] { cmd_ckpt({"import", "m.safetensors"}); }, {"import needs --out"});
  expect_error([] { cmd_ckpt({"export", "d", "--out"}); }, {"--out needs a value"});
  expect_error([] { cmd_ckpt({"inspect"}); }, {"inspect needs an input path"});
  expect_error([] { cmd_ckpt({"verify", "d", "--out", "x"}); }, {"verify takes no --out"});
  expect_error([] { cmd_ckpt({"inspect", "d", "--deep"}); }, {"unknown flag '--deep'"});
  expect_error([] { cmd_ckpt({"inspect", "d", "e"}); }, {"unexpected argument 'e'"});
  expect_error([] { cmd_ckpt({"diff", "a"}); }, {"diff needs two checkpoint paths"});
}

// A 1-rank checkpoint at `step`: a f32 [3, 4] tensor, plus an i64 scalar
// when `with_counter`.
void save_small_checkpoint(const std::string& root, int64_t step, float scale, bool with_counter) {
  auto world = comm::ThreadWorld::create(1);
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i) * scale;
  const int64_t counter = step * 10;
  checkpoint::SaveRequest req;
  req.step = step;
  req.metadata = {{"consumed_samples", 64}};
  req.pieces = {{"layer.weight", Shape{3, 4}, DType::F32, checkpoint::full_box(Shape{3, 4}), w.data()}};
  if (with_counter)
    req.pieces.push_back({"counter", Shape{}, DType::I64, checkpoint::full_box(Shape{}), &counter});
  checkpoint::save_checkpoint(*world->group(0), root, req);
}

TEST(CliCkpt, InspectAndVerifyASavedCheckpoint) {
  TempDir dir;
  save_small_checkpoint(dir / "a", 3, 0.5f, /*with_counter=*/true);

  const std::string info = stdout_of([&] { EXPECT_EQ(cmd_ckpt({"inspect", dir / "a"}), 0); });
  EXPECT_NE(info.find("step               3"), std::string::npos) << info;
  EXPECT_NE(info.find("layer.weight"), std::string::npos) << info;
  EXPECT_NE(info.find("[3, 4]"), std::string::npos) << info;
  EXPECT_NE(info.find("consumed samples   64"), std::string::npos) << info;
  EXPECT_NE(info.find("elements           13"), std::string::npos) << info;  // 12 + a scalar

  const std::string ok = stdout_of([&] { EXPECT_EQ(cmd_ckpt({"verify", dir / "a"}), 0); });
  EXPECT_EQ(ok.rfind("OK ", 0), 0u) << ok;
  EXPECT_NE(ok.find("step 3, 2 tensors, 2 pieces"), std::string::npos) << ok;

  // A flipped byte in the shard fails verification.
  const fs::path shard = fs::path(dir / "a") / "step-00000003" / "rank-00000.bin";
  std::string bytes = read_file(shard.string());
  ASSERT_FALSE(bytes.empty());
  bytes[5] ^= 0x10;
  write_file(shard.string(), bytes);
  EXPECT_THROW(stdout_of([&] { cmd_ckpt({"verify", dir / "a"}); }), CheckpointError);
  EXPECT_THROW(stdout_of([&] { cmd_ckpt({"verify", dir / "nowhere"}); }), CheckpointError);
}

TEST(CliCkpt, DiffExitCodeFollowsTheValues) {
  TempDir dir;
  save_small_checkpoint(dir / "a", 3, 0.5f, false);
  save_small_checkpoint(dir / "a2", 3, 0.5f, false);
  save_small_checkpoint(dir / "b", 3, 0.25f, false);
  const std::string same = stdout_of([&] { EXPECT_EQ(cmd_ckpt({"diff", dir / "a", dir / "a2"}), 0); });
  EXPECT_NE(same.find("IDENTICAL"), std::string::npos) << same;
  const std::string differ = stdout_of([&] { EXPECT_EQ(cmd_ckpt({"diff", dir / "a", dir / "b"}), 1); });
  EXPECT_NE(differ.find("values differ: layer.weight (11 elements"), std::string::npos) << differ;  // 0 * s equal
}

// `ckpt diff` on checkpoints holding integer tensors: compared as integers
// (the reader converts integers only to integers; i64 above 2^53 stays exact).
TEST(CliCkpt, DiffComparesIntegerTensors) {
  TempDir dir;
  save_small_checkpoint(dir / "a", 3, 0.5f, true);
  save_small_checkpoint(dir / "a2", 3, 0.5f, true);
  const std::string same = stdout_of([&] { EXPECT_EQ(cmd_ckpt({"diff", dir / "a", dir / "a2"}), 0); });
  EXPECT_NE(same.find("2 tensors compared: IDENTICAL"), std::string::npos) << same;
}

// ---- generate_command.cc -------------------------------------------------------

TEST(CliGenerate, ArgumentErrors) {
  expect_error([] { cmd_generate({}); }, {"generate: needs --from", "usage: meshtrain generate"});
  expect_error([] { cmd_generate({"--prompt", "hi"}); }, {"needs --from"});
  expect_error([] { cmd_generate({"--from", "d"}); }, {"needs --prompt"});
  expect_error([] { cmd_generate({"--from"}); }, {"--from needs a value"});
  expect_error([] { cmd_generate({"--from", "d", "--prompt", "x", "--tokens", "ten"}); },
               {"--tokens expects a number, got 'ten'"});
  expect_error([] { cmd_generate({"--from", "d", "--prompt", "x", "--tokens", "-1"}); }, {"--tokens must be >= 0"});
  expect_error([] { cmd_generate({"--from", "d", "--prompt", "x", "--temperature", "-0.5"}); },
               {"--temperature must be >= 0"});
  expect_error([] { cmd_generate({"--from", "d", "--prompt", "x", "--beam", "4"}); }, {"unknown argument '--beam'"});
}

// ---- verify_command.cc ---------------------------------------------------------

TEST(CliVerify, ArgumentErrors) {
  expect_error([] { cmd_verify({}); }, {"usage: meshtrain verify"});
  expect_error([] { cmd_verify({"c.toml"}); }, {"usage: meshtrain verify"});  // no --layout
  expect_error([] { cmd_verify({"--layout", "dp=2"}); }, {"usage: meshtrain verify"});  // no config
  expect_error([] { cmd_verify({"c.toml", "--layout"}); }, {"--layout needs a value"});
  expect_error([] { cmd_verify({"c.toml", "--layout", "dp=2", "--steps", "0"}); }, {"--steps must be positive"});
  expect_error([] { cmd_verify({"c.toml", "--layout", "dp=2", "--fast"}); }, {"unknown option '--fast'"});
  TempDir dir;
  expect_error([&] { cmd_verify({dir / "none.toml", "--layout", "dp=2"}); }, {"cannot read config file"});
}

// ---- train -> ckpt / generate / verify on a tiny model -------------------------

std::string tiny_config(const TempDir& dir) {
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "A tiny fortune, number " + std::to_string(i) + ".\n%\n";
  write_file(dir / "corpus/fortunes", corpus);
  const std::string cfg = dir / "tiny.toml";
  write_file(cfg, "[model]\nvocab_size = 259\nd_model = 16\nn_layers = 1\nn_heads = 2\nn_kv_heads = 1\n"
                  "ffn_hidden = 32\nmax_seq_len = 32\n"
                  "[data]\npath = \"" + dir / "data" + "\"\nsources = [\"" + dir / "corpus" + "\"]\n"
                  "format = \"fortune\"\nseq_len = 32\nval_fraction = 0.1\n"
                  "[training]\nsteps = 2\nmicro_batch = 2\neval_rows = 4\n"
                  "[optimizer]\nlr = 1e-2\nwarmup_steps = 0\n"
                  "[metrics]\nrun_dir = \"" + dir / "run" + "\"\nlog_every = 1\n"
                  "[checkpoint]\nevery = 2\n");
  return cfg;
}

TEST(CliTrain, TinyRunWritesMetricsAndACheckpointThatGenerateAndVerifyUse) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const std::string log = stdout_of([&] { EXPECT_EQ(cmd_train({cfg, "--set", "training.micro_batch=2"}), 0); });
  EXPECT_FALSE(log.empty());

  // Data prepared from the sources, one metrics line per step, a checkpoint at step 2.
  EXPECT_TRUE(fs::exists(fs::path(dir / "data") / "train.bin")) << "data.sources prepared into data.path";
  std::ifstream metrics(dir / "run/metrics.jsonl");
  int step_lines = 0;
  for (std::string line; std::getline(metrics, line);)
    if (line.find("\"loss\"") != std::string::npos) ++step_lines;
  EXPECT_EQ(step_lines, 2);
  EXPECT_EQ(read_file(dir / "run/checkpoints/latest"), "step-00000002\n");

  const std::string ok = stdout_of([&] { EXPECT_EQ(cmd_ckpt({"verify", dir / "run/checkpoints"}), 0); });
  EXPECT_NE(ok.find("step 2"), std::string::npos) << ok;

  // Greedy decoding is deterministic: the same text twice, after the prompt.
  auto generate = [&] {
    return stdout_of([&] {
      EXPECT_EQ(cmd_generate({"--from", dir / "run/checkpoints", "--prompt", "A tiny", "--tokens", "5",
                              "--temperature", "0"}),
                0);
    });
  };
  const std::string g1 = generate(), g2 = generate();
  EXPECT_EQ(g1.rfind("A tiny", 0), 0u) << g1;
  EXPECT_EQ(g1, g2);

  // verify parses the layout after loading the (valid) config and data.
  expect_error([&] { cmd_verify({cfg, "--layout", "dp=2,bogus=1", "--steps", "1"}); },
               {"unknown layout key 'bogus'"});
  expect_error([&] { cmd_verify({cfg, "--layout", "dp=two"}); }, {"layout dp=two: expected an integer"});
  expect_error([&] { cmd_verify({cfg, "--layout", "tp=2"}); }, {"do not train yet"});

  // plan: the config's layout by default, any mesh with --layout; nothing runs.
  const std::string own = stdout_of([&] { EXPECT_EQ(cmd_plan({cfg}), 0); });
  EXPECT_NE(own.find("layout: pp=1 dp=1 cp=1 tp=1 | zero_stage 0"), std::string::npos) << own;
  const std::string wide = stdout_of([&] { EXPECT_EQ(cmd_plan({cfg, "--layout", "tp=2,dp=2,zero=3"}), 0); });
  EXPECT_NE(wide.find("model.embed_tokens.weight"), std::string::npos) << wide;
  EXPECT_NE(wide.find("rank   3 (pp 0 dp 1 cp 0 tp 1)"), std::string::npos) << wide;
  expect_error([&] { cmd_plan({cfg, "--layout", "tp=3"}); }, {"model.n_heads = 2 does not split over parallel.tp = 3"});
  expect_error([&] { cmd_plan({cfg, "--layout", "pp=2"}); }, {"2 chunks but model.n_layers = 1"});
}

}  // namespace
}  // namespace meshtrain::cli
