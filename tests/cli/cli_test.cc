// Covers src/meshtrain/app/model_source.cc (generate and eval open checkpoints and safetensors through it);
// src/meshtrain/checkpoint/tokenizer_files.cc (an export keeps tokenizer.model);
// src/meshtrain/train/timeline_json.cc (timeline records written by train, read by `timeline`).
// The commands end to end through cli::run: data prepare + inspect, ckpt
// inspect / verify / diff on a checkpoint saved here, train a tiny model,
// generate from its checkpoint, eval reproducing train's validation numbers,
// and the subword path: tokenizer train -> data prepare -> train -> export
// -> reload -> generate.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "meshtrain/checkpoint/safetensors.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/comm/thread_world.h"

namespace meshtrain::cli {
namespace {

using namespace testing;

TEST(CliData, PrepareThenInspect) {
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 30; ++i) corpus += "Saying number " + std::to_string(i) + " is short.\n%\n";
  write_file(dir / "sayings", corpus);
  const Result r = run_cli({"data", "prepare", "--out=" + dir / "ds", "--format", "fortune", "--seed", "3",
                            "--val-fraction", "0.2", dir / "sayings"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "from 1 file(s)")) << r.out;
  EXPECT_TRUE(contains(r.out, "documents 30 (")) << r.out;
  EXPECT_TRUE(contains(r.out, "tokenizer {\"bos_id\":256")) << r.out;
  EXPECT_TRUE(r.err.empty()) << "a small input shows no progress: " << r.err;
  const Result info = run_cli({"data", "inspect", dir / "ds"});
  ASSERT_EQ(info.code, 0) << info.err;
  for (const char* s : {"train: ", "val: ", "unigram entropy", "tokenizer {"}) EXPECT_TRUE(contains(info.out, s));
  // Preparing into an existing dataset needs --overwrite.
  expect_failure({"data", "prepare", "--out", dir / "ds", dir / "sayings"}, "already exists");
  EXPECT_EQ(run_cli({"data", "prepare", "--overwrite", "--out", dir / "ds", "--", dir / "sayings"}).code, 0);
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
  if (with_counter) req.pieces.push_back({"counter", Shape{}, DType::I64, checkpoint::full_box(Shape{}), &counter});
  checkpoint::save_checkpoint(*world->group(0), root, req);
}

TEST(CliCkpt, InspectAndVerifyASavedCheckpoint) {
  TempDir dir;
  save_small_checkpoint(dir / "a", 3, 0.5f, /*with_counter=*/true);
  const Result info = run_cli({"ckpt", "inspect", dir / "a"});
  ASSERT_EQ(info.code, 0) << info.err;
  for (const char* s : {"step               3", "layer.weight", "[3, 4]", "consumed samples   64",
                        "elements           13"})
    EXPECT_TRUE(contains(info.out, s)) << s << "\n" << info.out;
  const Result ok = run_cli({"ckpt", "verify", dir / "a"});
  EXPECT_EQ(ok.code, 0);
  EXPECT_EQ(ok.out.rfind("OK ", 0), 0u) << ok.out;
  EXPECT_TRUE(contains(ok.out, "step 3, 2 tensors, 2 pieces")) << ok.out;
  // A flipped byte in the shard fails verification.
  const fs::path shard = fs::path(dir / "a") / "step-00000003" / "rank-00000.bin";
  std::string bytes = read_file(shard.string());
  ASSERT_FALSE(bytes.empty());
  bytes[5] ^= 0x10;
  write_file(shard.string(), bytes);
  expect_failure({"ckpt", "verify", dir / "a"}, "meshtrain ckpt verify: error: ");
  expect_failure({"ckpt", "verify", dir / "nowhere"}, "nowhere");
}

TEST(CliCkpt, DiffExitCodeFollowsTheValues) {
  TempDir dir;
  save_small_checkpoint(dir / "a", 3, 0.5f, true);
  save_small_checkpoint(dir / "a2", 3, 0.5f, true);
  save_small_checkpoint(dir / "b", 3, 0.25f, true);
  const Result same = run_cli({"ckpt", "diff", dir / "a", dir / "a2"});
  EXPECT_EQ(same.code, 0);
  EXPECT_TRUE(contains(same.out, "2 tensors compared: IDENTICAL")) << same.out;
  const Result differ = run_cli({"ckpt", "diff", dir / "a", dir / "b"});
  EXPECT_EQ(differ.code, 1);
  EXPECT_TRUE(contains(differ.out, "values differ: layer.weight (11 elements")) << differ.out;
}

// The eval record train wrote at its last step.
nlohmann::json last_eval(const std::string& metrics) {
  nlohmann::json e;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "eval") e = j;
  }
  return e;
}

// `eval` prints "loss sum X nats over N supervised tokens (B bytes of text)".
// Equal to train's validation up to the 6 printed decimals, or `relative`
// times the sum where that is larger (docs/cli.md, "Evaluation").
void expect_eval_matches_train(const std::vector<std::string>& eval_args, const nlohmann::json& train_eval,
                               double relative = 0) {
  const Result r = run_cli(eval_args);
  ASSERT_EQ(r.code, 0) << r.err;
  double sum = 0;
  long long n = 0, bytes = 0;
  const size_t at = r.out.find("loss sum ");
  ASSERT_NE(at, std::string::npos) << r.out;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "loss sum %lf nats over %lld supervised tokens (%lld bytes", &sum, &n,
                        &bytes),
            3)
      << r.out;
  ASSERT_FALSE(train_eval.is_null());
  // The same evaluation code on the same rows.
  const double want = train_eval["val_loss_sum"].get<double>();
  EXPECT_NEAR(sum, want, std::max(5e-6, relative * std::abs(want))) << "relative " << (sum - want) / want;
  EXPECT_EQ(n, train_eval["targets"].get<long long>());
  EXPECT_EQ(bytes, train_eval["target_bytes"].get<long long>());
  char bpb[64];
  std::snprintf(bpb, sizeof bpb, "%.4f bits/byte", train_eval["val_bits_per_byte"].get<double>());
  EXPECT_TRUE(contains(r.out, bpb)) << bpb << "\n" << r.out;
}

TEST(CliTrain, TinyRunThenCkptGenerateEvalAndVerify) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const Result log = run_cli({"train", cfg, "--set", "training.micro_batch=2"});
  ASSERT_EQ(log.code, 0) << log.err;
  EXPECT_TRUE(contains(log.out, "bits/byte")) << log.out;
  EXPECT_FALSE(contains(log.out, "\r")) << "not a terminal: plain lines only";
  EXPECT_TRUE(fs::exists(fs::path(dir / "data") / "train.bin")) << "data.sources prepared into data.path";
  int step_lines = 0, run_records = 0;
  std::ifstream metrics(dir / "run/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    if (contains(line, "\"loss\"")) ++step_lines;
    if (contains(line, "\"event\":\"run\"")) ++run_records;
  }
  EXPECT_EQ(step_lines, 2);
  EXPECT_EQ(run_records, 1);
  EXPECT_EQ(read_file(dir / "run/checkpoints/latest"), "step-00000002\n");

  // Greedy decoding is deterministic: the same text twice, after the prompt.
  const std::vector<std::string> gen = {"generate", "--from", dir / "run/checkpoints", "--prompt", "A tiny",
                                        "--tokens", "5", "--temperature", "0"};
  const Result g1 = run_cli(gen), g2 = run_cli(gen);
  ASSERT_EQ(g1.code, 0) << g1.err;
  EXPECT_EQ(g1.out.rfind("A tiny", 0), 0u) << g1.out;
  EXPECT_EQ(g1.out, g2.out);

  // eval on the same data and rows reproduces train's validation numbers.
  expect_eval_matches_train({"eval", "--from", dir / "run/checkpoints", "--data", dir / "data", "--rows", "4"},
                            last_eval(dir / "run/metrics.jsonl"));
  // All rows of a held-out text file: a sane, finite loss.
  write_file(dir / "held_out.txt", "A tiny fortune, number 99.\n");
  const Result text = run_cli({"eval", "--from", dir / "run/checkpoints", "--text", dir / "held_out.txt"});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "(27 bytes of text)")) << text.out;  // the text's bytes; EOS has none

  // verify parses the layout after loading the (valid) config and data.
  expect_failure({"verify", cfg, "--layout", "dp=2,bogus=1", "--steps", "1"}, "unknown layout key 'bogus'");
  expect_failure({"verify", cfg, "--layout", "dp=two"}, "layout dp=two: expected an integer");
  // Tensor and sequence parallelism train: the KV head shared by both tp ranks.
  const Result tp2 = run_cli({"verify", cfg, "--layout", "tp=2,sp=on", "--steps", "1"});
  EXPECT_EQ(tp2.code, 0) << tp2.err;
  EXPECT_TRUE(contains(tp2.out, "tp=2,sp=on vs single rank")) << tp2.out;
  EXPECT_TRUE(contains(tp2.out, "PASS")) << tp2.out;
  // ... and bitwise in reproducible mode, the shared KV head included (docs/math.md (M.76)).
  const Result tp2_bits = run_cli({"verify", cfg, "--layout", "tp=2,sp=on", "--steps", "1", "--bitwise"});
  EXPECT_EQ(tp2_bits.code, 0) << tp2_bits.err;
  EXPECT_TRUE(contains(tp2_bits.out, "KV heads shared by 2 tp ranks")) << tp2_bits.out;
  EXPECT_TRUE(contains(tp2_bits.out, "PASS")) << tp2_bits.out;
  expect_failure({"verify", cfg, "--layout", "tp=3"}, "model.n_heads = 2 does not split over parallel.tp = 3");
  // Context parallelism trains: 32 positions cut into 2 x 2 chunks; 2 x 3 chunks do not fit.
  const Result cp2 = run_cli({"verify", cfg, "--layout", "cp=2", "--steps", "1"});
  EXPECT_EQ(cp2.code, 0) << cp2.err;
  EXPECT_TRUE(contains(cp2.out, "cp=2 vs single rank")) << cp2.out;
  EXPECT_TRUE(contains(cp2.out, "PASS")) << cp2.out;
  expect_failure({"verify", cfg, "--layout", "cp=3"}, "data.seq_len = 32 does not split (32 % 6 = 2)");
  // ... and bitwise in reproducible mode, the claim naming it (docs/math.md (M.74)).
  const Result cp2_bits = run_cli({"verify", cfg, "--layout", "cp=2", "--steps", "1", "--bitwise"});
  EXPECT_EQ(cp2_bits.code, 0) << cp2_bits.err;
  EXPECT_TRUE(contains(cp2_bits.out, "context parallelism (cp 2: 8 canonical token blocks")) << cp2_bits.out;
  EXPECT_TRUE(contains(cp2_bits.out, "PASS")) << cp2_bits.out;
  // Expert parallelism trains: 2 experts over ep = 2 ranks carved out of dp = 2.
  const Result ep2 = run_cli({"verify", cfg, "--layout", "dp=2,ep=2", "--steps", "1", "--set", "model.n_experts=2"});
  EXPECT_EQ(ep2.code, 0) << ep2.err;
  EXPECT_TRUE(contains(ep2.out, "ep=2 vs single rank")) << ep2.out;
  EXPECT_TRUE(contains(ep2.out, "PASS")) << ep2.out;
  expect_failure({"verify", cfg, "--layout", "dp=2,ep=2"}, "parallel.ep = 2 splits the experts");

  // plan: the config's layout by default, any mesh with --layout; nothing runs.
  const Result own = run_cli({"plan", cfg});
  EXPECT_EQ(own.code, 0) << own.err;
  EXPECT_TRUE(contains(own.out, "layout: pp=1 dp=1 cp=1 tp=1 | zero_stage 0")) << own.out;
  const Result config_tp = run_cli({"plan", cfg, "--set", "parallel.tp=2", "--set", "parallel.sequence_parallel=true"});
  EXPECT_TRUE(contains(config_tp.out, "layout: pp=1 dp=1 cp=1 tp=2 | zero_stage 0 | v 1 | chunk placement loop | sequence parallel"))
      << config_tp.out;
  const Result wide = run_cli({"plan", cfg, "--layout", "tp=2,dp=2,zero=3"});
  EXPECT_EQ(wide.code, 0) << wide.err;
  EXPECT_TRUE(contains(wide.out, "model.embed_tokens.weight")) << wide.out;
  EXPECT_TRUE(contains(wide.out, "rank   3 (pp 0 dp 1 cp 0 tp 1)")) << wide.out;
  expect_failure({"plan", cfg, "--layout", "tp=3"}, "model.n_heads = 2 does not split over parallel.tp = 3");
  expect_failure({"plan", cfg, "--layout", "pp=2"}, "2 pipeline chunks but model.n_layers = 1");
  expect_failure({"train", cfg, "--set", "model.no_such_key=1"}, "no_such_key");
}

// eval runs the checkpoint's precision policy on one rank and equals train's
// validation within each policy's documented tolerance whatever layout
// trained it; evaluating a bf16 model in fp32 (what eval did before) is off
// by more than that.
TEST(CliEval, EqualsTrainValidationForEachPolicyAndLayout) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  struct Case {
    const char* precision;
    std::vector<std::string> layout;
    double relative;  // docs/cli.md: 1e-8 for fp32, 2e-6 for bf16 (sums over a tp group in another order)
  };
  const std::vector<std::string> tp2sp = {"--set", "parallel.tp=2", "--set", "parallel.sequence_parallel=true"};
  const std::vector<Case> cases = {{"fp32", {}, 1e-8},   {"bf16", {}, 2e-6},
                                   {"fp32", tp2sp, 1e-8}, {"bf16", tp2sp, 2e-6},
                                   {"fp32", {"--set", "parallel.dp=2"}, 1e-8}};
  for (const Case& c : cases) {
    const std::string run = dir / (std::string("run-") + c.precision + std::to_string(c.layout.size()));
    std::vector<std::string> args = {"train", cfg, "--set", std::string("training.precision=") + c.precision,
                                     "--set", "metrics.run_dir=" + run};
    args.insert(args.end(), c.layout.begin(), c.layout.end());
    const Result t = run_cli(args);
    ASSERT_EQ(t.code, 0) << t.err;
    SCOPED_TRACE(std::string(c.precision) + " " + (c.layout.empty() ? "" : c.layout[1]));
    const nlohmann::json train_eval = last_eval(run + "/metrics.jsonl");
    expect_eval_matches_train({"eval", "--from", run + "/checkpoints", "--data", dir / "data", "--rows", "4"},
                              train_eval, c.relative);
    if (std::string(c.precision) == "bf16") {
      const Result fp32 = run_cli({"eval", "--from", run + "/checkpoints", "--data", dir / "data", "--rows", "4",
                                   "--precision", "fp32"});
      ASSERT_EQ(fp32.code, 0) << fp32.err;
      double sum = 0;
      ASSERT_EQ(std::sscanf(fp32.out.c_str() + fp32.out.find("loss sum "), "loss sum %lf", &sum), 1) << fp32.out;
      const double want = train_eval["val_loss_sum"].get<double>();
      EXPECT_GT(std::abs(sum - want), 2e-6 * want) << "an fp32 evaluation of a bf16 model is not train's validation";
      EXPECT_TRUE(contains(fp32.out, "(fp32)")) << fp32.out;
    }
  }
}

// tokenizer train -> data prepare --tokenizer -> train -> export -> reload
// (import and safetensors) -> generate, and eval on the subword data.
TEST(CliTokenizer, SubwordModelFromTokenizerToGeneration) {
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 60; ++i)
    corpus += "The model number " + std::to_string(i) + " trains on a mesh; every layout computes the same update.\n%\n";
  write_file(dir / "corpus/fortunes", corpus);
  const Result t = run_cli({"tokenizer", "train", "--vocab", "320", "--out", dir / "tok/tokenizer.model",
                            dir / "corpus"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_TRUE(contains(t.out, "vocabulary 320")) << t.out;
  expect_failure({"tokenizer", "train", "--vocab", "320", "--out", dir / "tok/tokenizer.model", dir / "corpus"},
                 "already exists");
  const Result p = run_cli({"data", "prepare", "--out", dir / "data", "--tokenizer", dir / "tok/tokenizer.model",
                            "--val-fraction", "0.1", dir / "corpus"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(contains(p.out, "\"type\":\"sentencepiece\"")) << p.out;

  const std::string cfg = dir / "sub.toml";
  write_file(cfg, "[model]\nvocab_size = 320\nd_model = 16\nn_layers = 1\nn_heads = 2\nn_kv_heads = 1\n"
                  "ffn_hidden = 32\nmax_seq_len = 32\n"
                  "[data]\npath = \"" + dir / "data" + "\"\ntokenizer = \"" + dir / "tok/tokenizer.model" + "\"\n"
                  "seq_len = 32\n[training]\nsteps = 3\nmicro_batch = 2\n"
                  "[optimizer]\nlr = 1e-2\nwarmup_steps = 0\n"
                  "[metrics]\nrun_dir = \"" + dir / "run" + "\"\n[checkpoint]\nevery = 3\n");
  const Result tr = run_cli({"train", cfg});
  ASSERT_EQ(tr.code, 0) << tr.err;
  EXPECT_TRUE(contains(tr.out, "bits/byte")) << tr.out;
  expect_eval_matches_train({"eval", "--from", dir / "run/checkpoints", "--data", dir / "data"},
                            last_eval(dir / "run/metrics.jsonl"));

  // The checkpoint carries the tokenizer; export writes it beside the weights.
  EXPECT_TRUE(contains(run_cli({"ckpt", "inspect", dir / "run/checkpoints"}).out, "\"type\":\"sentencepiece\""));
  const Result ex = run_cli({"ckpt", "export", dir / "run/checkpoints", "--out", dir / "export/model.safetensors"});
  ASSERT_EQ(ex.code, 0) << ex.err;
  EXPECT_EQ(read_file(dir / "export/tokenizer.model"), read_file(dir / "tok/tokenizer.model"));
  const auto config = nlohmann::json::parse(read_file(dir / "export/config.json"));
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  EXPECT_EQ(config["pad_token_id"], 3);

  // A bf16 export keeps the tokenizer files too.
  ASSERT_EQ(run_cli({"ckpt", "export", dir / "run/checkpoints", "--out", dir / "bf16/", "--dtype",
                     "bf16", "--no-progress"})
                .code,
            0);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir / "bf16/config.json"))["torch_dtype"], "bfloat16");
  EXPECT_EQ(read_file(dir / "bf16/tokenizer.model"), read_file(dir / "tok/tokenizer.model"));
  // f16 and q8_0 are GGUF's types, not safetensors'.
  expect_failure({"ckpt", "export", dir / "run/checkpoints", "--out", dir / "f16/", "--dtype", "f16"},
                 "add --format gguf");

  // Reloaded from the safetensors file and from its import: the same text as
  // from the training checkpoint.
  ASSERT_EQ(run_cli({"ckpt", "import", dir / "export/model.safetensors", "--out", dir / "imported"}).code, 0);
  auto generate = [&](const std::string& from) {
    const Result g = run_cli({"generate", "--from", from, "--prompt", "The model", "--tokens", "8", "--temperature",
                              "0.9", "--seed", "4"});
    EXPECT_EQ(g.code, 0) << g.err;
    return g.out;
  };
  const std::string from_ckpt = generate(dir / "run/checkpoints");
  EXPECT_EQ(from_ckpt.rfind("The model", 0), 0u) << from_ckpt;
  EXPECT_EQ(generate(dir / "export/model.safetensors"), from_ckpt);
  EXPECT_EQ(generate(dir / "imported"), from_ckpt);

  // A file written by another tool: no meshtrain metadata, the tokenizer
  // only as tokenizer.model beside it (with config.json).
  {
    const auto file = checkpoint::SafetensorsReader::open(dir / "export/model.safetensors");
    std::vector<std::vector<float>> values;
    std::vector<checkpoint::SafetensorsTensor> views;
    for (const auto& e : file.header().entries) values.push_back(file.read_f32(e.name));
    for (size_t i = 0; i < values.size(); ++i) {
      const auto& e = file.header().entries[i];
      views.push_back({e.name, DType::F32, e.shape, values[i].data()});
    }
    fs::create_directories(dir / "hf");
    checkpoint::write_safetensors(dir / "hf/model.safetensors", views, {{"format", "pt"}});
    fs::copy_file(dir / "export/config.json", dir / "hf/config.json");
    fs::copy_file(dir / "export/tokenizer.model", dir / "hf/tokenizer.model");
  }
  EXPECT_EQ(generate(dir / "hf/model.safetensors"), from_ckpt);
  ASSERT_EQ(run_cli({"ckpt", "import", dir / "hf/model.safetensors", "--out", dir / "hf_imported"}).code, 0);
  EXPECT_EQ(generate(dir / "hf_imported"), from_ckpt);

  // A byte-level dataset is not this model's data.
  write_file(dir / "byte/c.txt", "some text\n");
  ASSERT_EQ(run_cli({"data", "prepare", "--out", dir / "bytes", dir / "byte/c.txt"}).code, 0);
  expect_failure({"eval", "--from", dir / "run/checkpoints", "--data", dir / "bytes"}, "was tokenized with");
}

// Pipeline: train with a timeline, draw it, verify schedules, plan stages.
TEST(CliPipeline, TrainRecordsATimelineThatTimelineDrawsAndVerifyChecksSchedules) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const Result train =
      run_cli({"train", cfg, "--set", "model.n_layers=2", "--set", "parallel.pp=2", "--set", "parallel.schedule=zb-h1",
               "--set", "training.grad_accum=3", "--set", "metrics.pipeline_timeline=true", "--set",
               "checkpoint.every=0"});
  ASSERT_EQ(train.code, 0) << train.err;
  const std::string log = train.out + train.err;
  EXPECT_TRUE(contains(log, "pipeline stages (blocks balanced by the cost model; zb-h1, m = 3)")) << log;
  EXPECT_TRUE(contains(log, "stage 1: [block 1 .. head]")) << log;
  EXPECT_TRUE(contains(log, "| bubble ")) << log;
  EXPECT_TRUE(contains(read_file(dir / "run/metrics.jsonl"), "\"event\":\"pipeline_timeline\""));

  const Result drawn = run_cli({"timeline", dir / "run", "--out", dir / "t.svg"});
  ASSERT_EQ(drawn.code, 0) << drawn.err;
  EXPECT_TRUE(contains(drawn.out, "step 2 | zb-h1, p = 2, m = 3, v = 1 | bubble measured")) << drawn.out;
  EXPECT_TRUE(contains(drawn.out, "costed simulation")) << drawn.out;
  const std::string svg = read_file(dir / "t.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_TRUE(contains(svg, "stage 1"));
  expect_failure({"timeline", dir / "run", "--step", "7"}, "no pipeline timeline for step 7");
  expect_usage_error({"timeline"}, "RUN_DIR is required", "meshtrain timeline");

  const Result ok = run_cli({"verify", cfg, "--layout", "pp=2,schedule=zb-v", "--steps", "2", "--tolerance", "0",
                             "--set", "model.n_layers=4"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(contains(ok.out, "pp=2,schedule=zb-v,v=2 vs single rank")) << ok.out;
  EXPECT_TRUE(contains(ok.out, "PASS")) << ok.out;
  expect_failure({"verify", cfg, "--layout", "pp=2,schedule=zb-v,v=3", "--set", "model.n_layers=4"},
                 "exactly 2 chunks per rank");
  const Result planned = run_cli({"plan", cfg, "--layout", "pp=2,schedule=1f1b", "--set", "model.n_layers=4"});
  EXPECT_EQ(planned.code, 0) << planned.err;
  EXPECT_TRUE(contains(planned.out, "pipeline stages (blocks balanced by the cost model; 1f1b, m = 1)"))
      << planned.out;
}

// Every argument is checked before anything is prepared or written.
TEST(CliVerify, ABadLayoutIsRejectedBeforeTheDataIsPrepared) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  expect_failure({"verify", cfg, "--layout", "dp=x"}, "layout dp=x: expected an integer");
  EXPECT_FALSE(fs::exists(dir / "data")) << "the dataset was prepared for a command that could not run";
}

// Export and import never replace files or move a `latest` without --force.
TEST(CliCkpt, ExportAndImportNeedForceToReplace) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  ASSERT_EQ(run_cli({"train", cfg}).code, 0);
  const std::string ckpt = dir / "run/checkpoints", out = dir / "export/model.safetensors";
  ASSERT_EQ(run_cli({"ckpt", "export", ckpt, "--out", out}).code, 0);
  expect_failure({"ckpt", "export", ckpt, "--out", out}, "pass --force");
  expect_failure({"ckpt", "export", ckpt, "--out", ckpt + "/step-00000002/rank-00000.bin"}, "inside a checkpoint");
  EXPECT_EQ(run_cli({"ckpt", "export", ckpt, "--out", out, "--force"}).code, 0);
  expect_failure({"ckpt", "import", out, "--out", ckpt}, "already holds checkpoints");
  EXPECT_EQ(read_file(ckpt + "/latest"), "step-00000002\n");
  EXPECT_EQ(run_cli({"ckpt", "import", out, "--out", ckpt, "--force"}).code, 0);
  EXPECT_EQ(read_file(ckpt + "/latest"), "step-00000000\n");
}

// The launcher validates its numbers and the job's config before starting mpirun.
TEST(CliLaunch, ArgumentErrorsNameTheOption) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  expect_usage_error({"launch", "-n", "two", cfg}, "--np", "meshtrain launch");
  expect_usage_error({"launch", "-n", "2", "--max-restarts", "-1", cfg}, "--max-restarts", "meshtrain launch");
  expect_failure({"launch", "-n", "2", cfg, "--set", "optimizer.lr=inf"}, "optimizer.lr");
  expect_usage_error({"train", cfg, "--max-restarts", "x"}, "--max-restarts", "meshtrain train");
}

}  // namespace
}  // namespace meshtrain::cli
