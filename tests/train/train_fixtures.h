// Small in-memory datasets and configs for trainer tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/parallel/global_values.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::testing {

// Documents of varied length (so supervised counts differ between rows and
// micro-batches), BOS ... EOS, byte tokens.
inline data::TokenDataset varied_documents(int n_docs, uint64_t seed) {
  CounterRng rng(seed);
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < n_docs; ++d) {
    const int len = 3 + int(rng.uniform(1, d) * 20);
    std::vector<int32_t> doc{256};
    for (int i = 0; i < len; ++i) doc.push_back(int32_t(97 + int(rng.uniform(2, d * 100 + i) * 8)));
    doc.push_back(257);
    docs.push_back(doc);
  }
  return data::TokenDataset::from_documents(docs);
}

// Documents for context parallelism over 32-position rows, lengths cycling
// through 2 (shorter than any chunk), 5, 11 (across chunk boundaries), 19
// (longer than a rank's share at cp = 2) and 45 (longer than a row: split
// over rows by packing).
inline data::TokenDataset mixed_length_documents(int n_docs) {
  const int lengths[] = {2, 5, 11, 19, 45};
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < n_docs; ++d) {
    std::vector<int32_t> doc{256};
    for (int i = 0; i < lengths[d % 5]; ++i) doc.push_back(int32_t(97 + (d * 7 + i * 3) % 23));
    doc.push_back(257);
    docs.push_back(doc);
  }
  return data::TokenDataset::from_documents(docs);
}

inline train::TrainConfig tiny_train_config() {
  train::TrainConfig c;
  c.model.vocab_size = 259;
  c.model.d_model = 16;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.model.n_kv_heads = 1;
  c.model.ffn_hidden = 32;
  c.model.max_seq_len = 16;
  c.data.path = "<memory>";
  c.data.seq_len = 16;
  c.data.mode = "padded";
  c.training.steps = 3;
  c.training.micro_batch = 4;
  c.training.grad_accum = 1;
  c.optimizer.lr = 1e-2;
  c.optimizer.warmup_steps = 0;
  c.optimizer.grad_clip = 1.0;
  c.metrics.jsonl = "";
  return c;
}

// The tensor-parallel tests' model: tiny_train_config with `heads` query
// heads of `head_dim` (d_model heads x head_dim), `kv` KV heads, Llama's
// choices or GPT-2's (LayerNorm, learned positions, GELU, biases), tied or
// not; 2 micro-batches of 4 rows, one compute thread per rank (tiny matrices).
inline train::TrainConfig tp_test_config(int64_t heads, int64_t head_dim, int64_t kv, bool gpt2, bool tied) {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = heads;
  cfg.model.head_dim = head_dim;
  cfg.model.n_kv_heads = kv;
  cfg.model.tied_embeddings = tied;
  if (gpt2) {
    cfg.model.norm = model::NormKind::LayerNorm;
    cfg.model.positions = model::PositionKind::Learned;
    cfg.model.mlp = model::MlpKind::Gelu;
    cfg.model.bias = true;
  }
  cfg.optimizer.lr = 1e-3;
  cfg.training.micro_batch = 4;
  cfg.training.grad_accum = 2;
  cfg.training.threads = 1;
  return cfg;
}

// Runs `f`, which must throw ConfigError with `text` in its message.
template <typename F>
void expect_config_error(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError, expected one saying: " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// The MoE tests' model: tiny_train_config with 4 routed experts of ffn 16,
// one compute thread per rank (tiny matrices).
inline train::TrainConfig tiny_moe_config(int64_t top_k, bool shared, double capacity) {
  auto cfg = tiny_train_config();
  cfg.model.n_experts = 4;
  cfg.model.experts_top_k = top_k;
  cfg.model.moe_shared_expert = shared;
  cfg.model.moe_capacity_factor = capacity;
  cfg.model.ffn_hidden = 16;
  cfg.training.threads = 1;
  return cfg;
}

// A model and 32-position packed rows for context parallelism (2 x cp
// chunks up to cp = 16): 4 query heads over 2 KV heads, 2 rows per
// micro-batch, 2 micro-batches, one compute thread per rank.
inline train::TrainConfig context_parallel_config() {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = 4;
  cfg.model.head_dim = 4;  // d_model 16
  cfg.model.n_kv_heads = 2;
  cfg.model.max_seq_len = 32;
  cfg.data.seq_len = 32;
  cfg.data.mode = "packed";
  cfg.optimizer.lr = 1e-3;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  cfg.training.threads = 1;  // tiny matrices: one compute thread per rank
  return cfg;
}

// The largest relative differences an equivalence matrix saw (per tensor,
// the tensor named), per precision, printed with the tolerances at the end
// of a test.
struct WorstDifference {
  struct Worst {
    double loss = 0, tolerance = 0;
    train::TensorDiff grad, update, param;
  };
  std::map<std::string, Worst> by_precision;
  void add(const train::EquivalenceReport& r) {
    auto keep = [](train::TensorDiff& worst, const train::TensorDiff& d) {
      if (d.rel > worst.rel) worst = d;
    };
    Worst& w = by_precision[r.precision];
    w.tolerance = std::max(w.tolerance, r.tolerance);
    for (const auto& s : r.steps) {
      w.loss = std::max(w.loss, s.loss_rel);
      keep(w.grad, s.grad);
      keep(w.update, s.update);
      keep(w.param, s.param);
    }
  }
  void print() const {
    for (const auto& [precision, w] : by_precision)
      std::printf(
          "%s: worst relative difference per tensor: loss %.2e, gradients %.2e (%s), updates %.2e (%s), parameters "
          "%.2e (%s) (tolerance %.0e)\n",
          precision.c_str(), w.loss, w.grad.rel, w.grad.tensor.c_str(), w.update.rel, w.update.tensor.c_str(),
          w.param.rel, w.param.tensor.c_str(), w.tolerance);
  }
};

// The two runs of an equivalence check: cfg under fp64 at its default
// tolerance (1e-10: where a layout reorders sums only ~1e-15 of rounding
// remains, so any real error shows), then cfg as given at `tolerance` (its
// own kernels: the f32 GEMM, the per-ISA vector code).
inline std::vector<std::pair<train::TrainConfig, double>> in_fp64_and_own(const train::TrainConfig& cfg,
                                                                          double tolerance) {
  auto fp64 = cfg;
  fp64.training.precision = "fp64";
  fp64.training.grad_reduce_dtype = "fp32";  // the key's default: gradients reduced in f64
  return {{fp64, train::default_tolerance("fp64")}, {cfg, tolerance}};
}

// `layout` against one rank on the same global batch (equivalence.h, per
// tensor) in both runs of in_fp64_and_own; expects both to pass.
inline void expect_matches_one_rank(const train::TrainConfig& cfg, const train::Layout& layout, int steps,
                                    const data::TokenDataset& ds, double tolerance,
                                    WorstDifference* worst = nullptr) {
  for (const auto& [c, tol] : in_fp64_and_own(cfg, tolerance)) {
    SCOPED_TRACE(c.training.precision);
    const auto r = train::compare_with_single_rank(c, layout, steps, ds, tol);
    EXPECT_TRUE(r.pass()) << r.str();
    if (worst) worst->add(r);
  }
}

// Gathered full parameters (or reduced gradients) as doubles, for comparisons.
inline std::vector<double> gathered(train::Trainer& t, bool grads = false) {
  const auto v = grads ? t.engine().gather_grads() : t.engine().gather_params();
  return {v.begin(), v.end()};
}

// Runs fn on every rank of the threads world the config's layout needs
// (dp x cp x tp x pp), each with its Trainer on the same datasets.
// max_tag: the groups' tag bound (comm/types.h GroupOptions; 0: the backend's).
inline void with_trainers(const train::TrainConfig& cfg, const data::TokenDataset& train_ds,
                          const std::optional<data::TokenDataset>& val_ds,
                          const std::function<void(train::Trainer&)>& fn, int max_tag = 0) {
  comm::LaunchOptions o;
  o.world_size = cfg.parallel.dp * cfg.parallel.cp * cfg.parallel.tp * cfg.parallel.pp;
  o.mesh = train::mesh_for(cfg, o.world_size);
  o.group.timeout = comm::Millis(60000);
  o.group.max_tag = max_tag;
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    if (cfg.training.threads > 0) set_compute_threads(cfg.training.threads);  // as train_main does
    train::Trainer t(cfg, ctx, train_ds, val_ds);
    fn(t);
  });
}

// Runs act on every rank of the config's layout; returns rank 0's whole
// parameters in global order after it (the same vector under any split).
inline std::vector<double> params_after(const train::TrainConfig& cfg, const data::TokenDataset& ds,
                                        const std::function<void(train::Trainer&)>& act) {
  std::vector<double> params;
  std::mutex mu;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    act(t);
    auto p = parallel::gather_global_values(t.engine(), t.context().group({"pp", "tp"}), false);
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0) params = std::move(p);
  });
  return params;
}

// Whether a bitwise report's claim names `what` (EquivalenceReport::claim_covers).
inline bool claims_cover(const train::EquivalenceReport& r, const std::string& what) {
  for (const std::string& c : r.claim_covers)
    if (c.find(what) != std::string::npos) return true;
  return false;
}

// Reproducible mode across a resume (restore_claim.h): 3 steps on one rank
// uninterrupted, against 1 step at `saved_at`, a checkpoint, and 2 more
// steps at `resumed_at` from it. Expects the same final bits and a claim of
// a bitwise replay with 8 canonical blocks.
inline void expect_resume_continues_the_same_bits(const train::TrainConfig& cfg, const data::TokenDataset& ds,
                                                  const char* saved_at, const char* resumed_at) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("mt-resume-bits-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto at = [&](const char* layout, const std::string& run) {
    train::TrainConfig c = train::with_layout(cfg, train::parse_layout(layout));
    c.training.reproducible = true;
    c.metrics.run_dir = (root / run).string();
    c.validate();
    return c;
  };
  const std::vector<double> straight = params_after(at("dp=1", "one"), ds, [](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) t.step();
  });
  params_after(at(saved_at, "saved"), ds, [](train::Trainer& t) {
    t.step();
    t.save_checkpoint();
  });
  std::string claim;
  const std::vector<double> resumed = params_after(at(resumed_at, "resumed"), ds, [&](train::Trainer& t) {
    const std::string c = t.restore(checkpoint::CheckpointReader::open((root / "saved" / "checkpoints").string()));
    if (t.context().rank == 0) claim = c;
    t.step();
    t.step();
  });
  EXPECT_EQ(claim.rfind("bitwise replay: reproducible mode with 8 canonical blocks", 0), 0u) << claim;
  ASSERT_FALSE(straight.empty());
  EXPECT_EQ(resumed, straight);
  fs::remove_all(root);
}

// A checkpoint resharded (docs/math.md, "Rule: restore claims"): `run(act)`
// runs one layout's ranks with `act` and returns the whole parameters after it
// (params_after on that layout, the run directory set). Restores the checkpoint
// in `from`, whose claim must start with `claim` and which must hold `steps`
// steps, and saves it again into `to`: the restored parameters are `trained`
// and the new checkpoint is `saved`, bit for bit. Returns the comparison.
using LayoutRun = std::function<std::vector<double>(const std::function<void(train::Trainer&)>&)>;
inline checkpoint::CheckpointDiff expect_resaved_identically(const LayoutRun& run, const std::string& from,
                                                             const std::string& to, const std::string& claim,
                                                             int64_t steps, const std::vector<double>& trained,
                                                             const checkpoint::CheckpointReader& saved) {
  const std::vector<double> loaded = run([&](train::Trainer& t) {
    const std::string got = t.restore(checkpoint::CheckpointReader::open(from));
    EXPECT_EQ(got.rfind(claim, 0), 0u) << got;
    EXPECT_EQ(t.steps_done(), steps);
    t.save_checkpoint();
  });
  EXPECT_EQ(loaded, trained) << "the restored parameters are the saved ones";
  const auto diff = checkpoint::compare_checkpoints(saved, checkpoint::CheckpointReader::open(to));
  EXPECT_TRUE(diff.identical()) << diff.str();
  return diff;
}

// One rank's records (equivalence.h) of `steps` updates on the global
// window of `cfg` run over R replicas (G' = R x G), one compute thread: the
// in-process reference of the MPI equivalence tests.
inline std::vector<train::StepRecord> single_rank_records(const train::TrainConfig& cfg, int R,
                                                          const data::TokenDataset& ds, int steps) {
  auto ref = cfg;
  ref.parallel = parallel::ParallelConfig{};
  ref.training.grad_accum = parallel::window_micro_batches(R, cfg.parallel.replica_grad_accum,
                                                         cfg.training.grad_accum);  // the same global window
  std::vector<train::StepRecord> records;
  with_trainers(ref, ds, std::nullopt, [&](train::Trainer& t) {
    set_compute_threads(1);  // the processes share the machine
    records = train::record_steps(t, steps);
  });
  return records;
}

// The reference's whole parameters in global order after `steps` updates.
inline std::vector<double> single_rank(const train::TrainConfig& cfg, int R, const data::TokenDataset& ds,
                                       int steps = 3) {
  return single_rank_records(cfg, R, ds, steps).back().params;
}

// The 8-rank cells that compose every axis (dp2 x tp2 x pp2 with ZeRO-3;
// cp2 x tp2 x dp2): 4 blocks (two per stage), the tied embedding's head on
// the other stage, one KV head shared by the tp pair, 2 rows x 2
// micro-batches, one compute thread per rank. d_model 32 and ffn 96 make a
// block's tp-local unit (about 5,900 elements) larger than the 4,096-
// element norm blocks ZeRO shards by, so both dp ranks own part of it.
inline train::TrainConfig all_axes_config() {
  auto cfg = tiny_train_config();
  cfg.optimizer.lr = 1e-3;
  cfg.model.d_model = 32;
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 1;
  cfg.model.ffn_hidden = 96;
  cfg.model.n_layers = 4;
  cfg.model.tied_embeddings = true;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  cfg.training.threads = 1;
  return cfg;
}
inline const char* const kAllAxesCells[] = {"dp=2,tp=2,pp=2,zero=3", "cp=2,tp=2,dp=2"};

// An empty directory under the test's temporary directory, per process
// (other test processes and checkouts share the temp dir); all of them are
// removed when the process ends.
inline std::filesystem::path fresh_dir(const std::string& name) {
  static struct Cleanup {
    std::filesystem::path root =
        std::filesystem::path(::testing::TempDir()) / ("mt_ckpt_" + std::to_string(::getpid()));
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(root, ec);
    }
  } cleanup;
  std::filesystem::path d = cleanup.root / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Every tensor of a checkpoint, by name.
inline std::map<std::string, std::vector<float>> tensors_of(const std::filesystem::path& root) {
  const auto r = checkpoint::CheckpointReader::open(root.string());
  std::map<std::string, std::vector<float>> out;
  for (const auto& name : r.names()) {
    std::vector<float> v(size_t(r.tensor(name).shape.numel()));
    r.read_all(name, v.data(), DType::F32);
    out[name] = std::move(v);
  }
  return out;
}

}  // namespace meshtrain::testing
