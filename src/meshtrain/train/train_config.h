// The whole run configuration, read from TOML ([model] [data] [training]
// [optimizer] [metrics]) and validated strictly before anything runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/precision.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/optim/loss_scaler.h"
#include "meshtrain/optim/optimizer_config.h"
#include "meshtrain/parallel/parallel_config.h"

namespace meshtrain::train {

struct DataConfig {
  std::string path;                  // prepared dataset directory (data prepare --out)
  std::vector<std::string> sources;  // prepared into `path` first when it holds no dataset
  std::string format = "auto";       // of sources: auto | text | jsonl | fortune
  std::string tokenizer;             // SentencePiece model for sources ("": byte tokenizer)
  double val_fraction = 0.05;
  std::string mode = "packed";       // packed | padded
  int64_t seq_len = 256;
  uint64_t seed = 1;
  int64_t bucket_pool = 16;          // padded mode: pool of bucket_pool * rows documents
};

struct TrainingConfig {
  int64_t steps = 100;       // updates of the run (and of the LR schedule)
  int64_t stop_at = 0;       // end this process after that step (0: steps); resume continues
  int64_t micro_batch = 8;   // rows per micro-batch
  int64_t grad_accum = 1;    // micro-batches per update (G)
  int64_t eval_every = 0;    // 0: only at the end
  int64_t eval_rows = 0;     // rows of validation per evaluation; 0: the whole split
  std::string precision = "fp32";          // fp32 | bf16 | fp16 | fp64 (core/precision.h)
  std::string grad_reduce_dtype = "fp32";  // gradients on the wire: fp32 | bf16 | fp16 (16-bit precisions)
  optim::LossScaleConfig loss_scale;       // fp16: dynamic loss scaling
  bool recompute = false;
  // The LM head, the loss and their gradients run in backward this many
  // rows at a time: [head_chunk_rows, vocab] logits instead of the
  // micro-batch's [n, vocab] (model/segments.h); 0: all rows at once.
  int64_t head_chunk_rows = 0;
  // Every reduction in a fixed order that depends only on the global batch
  // and the model (gradients in a tree over the global micro-batch index):
  // any dp x grad_accum split of the same window gives the same bits.
  bool reproducible = false;
  // Reproducible mode's canonical blocks (docs/math.md (M.73)): every sum
  // over a dimension tensor parallelism splits is computed as this many
  // blocks in one fixed tree on every layout (a power of two tp divides).
  int reproducible_blocks = 8;
  int canonical_blocks() const { return reproducible ? reproducible_blocks : 0; }  // 0: off
  int threads = 0;           // compute threads; 0: the cores other work leaves idle at start (more: capped, warned)
  bool check_memory = true;  // refuse to start when the recorded step's peak exceeds what is available
};

struct MetricsConfig {
  std::string run_dir = "runs/default";
  std::string jsonl = "metrics.jsonl";  // relative to run_dir; "" disables
  int64_t log_every = 1;
  bool pipeline_timeline = false;       // record every stage's action start/end per logged step
  bool allow_nonempty_run_dir = false;  // use a run_dir holding other files (train/run_dir.h)
};

struct CommConfig {
  std::string backend = "threads";  // threads | mpi (run under mpirun)
  double timeout_s = 300;           // every collective fails after this long
  bool check = false;               // verify every collective's fingerprint
  // Stragglers and hangs (docs/comm.md): a rank whose compute time per step
  // is at least this times the median rank's, for a few steps in a row, is
  // named a straggler (0: off; else > 1).
  double straggler_factor = 1.5;
  // A rank without progress outside collectives for this long is hung and
  // ends the job, before timeout_s (-1: timeout_s / 5; 0: off; else < timeout_s).
  double heartbeat_timeout_s = -1;
  double heartbeat_s() const { return heartbeat_timeout_s < 0 ? timeout_s / 5 : heartbeat_timeout_s; }
  // When a rank dies or a collective fails, every rank stops with the named
  // error and the job restarts from the latest complete checkpoint, at most
  // max_restarts times (threads: in this process; mpirun: `meshtrain launch`).
  bool restart_on_failure = false;
  int max_restarts = 3;
  // Elastic membership (docs/comm.md, "Elastic membership"): on a failure the
  // job continues on the ranks left at the largest runnable layout of the
  // same global window (not below min_ranks), and grows back at a step
  // boundary when the run directory's `capacity` file allows more.
  bool elastic = false;
  int min_ranks = 1;
  // Run a tp or cp group whose ranks are on more than one node instead of
  // refusing the layout (docs/multi-node.md; `meshtrain launch --allow-cross-node-tp`).
  bool allow_cross_node_tp = false;
  // Data-parallel collectives of groups that span nodes as reduce-scatter
  // inside the node, all-reduce across, all-gather inside (docs/comm.md,
  // "Hierarchical collectives"): auto | on | off. auto: per collective, the
  // form the planner predicts faster on `hardware`; without one, flat.
  std::string hierarchical = "auto";
  std::string hardware;  // a machine profile (configs/hardware/*.toml) for auto; "": none
};

struct CheckpointConfig {
  std::string dir;           // "" : <metrics.run_dir>/checkpoints
  int64_t every = 0;         // save every N steps and at the end; 0: never
  int keep_last = 3;         // complete checkpoints kept
  bool async = false;        // stage, keep training, commit in the background
  bool resume = true;        // continue from <dir>/latest when present
  std::string init_from;     // weights to start from: checkpoint dir or .safetensors
  // A resume refuses a config that differs from the checkpoint's; the keys
  // listed here may differ (e.g. ["optimizer.lr"]) and the resume says so.
  std::vector<std::string> allow_changes;
  bool weights_only = false;  // resume the weights, step and data position; optimizer state starts fresh
  std::string resolved_dir(const std::string& run_dir) const;
};

struct TrainConfig {
  model::ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  optim::OptimizerConfig optimizer;
  MetricsConfig metrics;
  parallel::ParallelConfig parallel;
  CommConfig comm;
  CheckpointConfig checkpoint;
  void validate();  // finalizes the model config too
  PrecisionPolicy precision() const {
    return PrecisionPolicy::from_name(training.precision, training.grad_reduce_dtype);
  }
};

// Reproducible mode sums the window's dp x cp x grad_accum micro-batches
// (cp x the sum of parallel.replica_grad_accum when uneven) in a binary
// tree: ConfigError with the arithmetic unless a power of two. validate()
// checks it where dp is known; the trainer with the world's dp.
void check_reproducible_window(int64_t dp, int64_t cp, int64_t grad_accum,
                               const std::vector<int64_t>& replica_grad_accum = {});

// Parses the file, applies --set overrides, validates. ConfigError on any
// unknown key, wrong type or impossible shape.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
TrainConfig parse_config(const std::string& toml_text, const std::vector<std::string>& overrides = {},
                         const std::string& source = "<string>");

}  // namespace meshtrain::train
