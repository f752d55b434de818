#include "meshtrain/train/train_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/core/precision.h"
#include "meshtrain/model/model_config_fields.h"
#include "meshtrain/core/suggest.h"
#include "meshtrain/parallel/pipeline_config.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/cp_config.h"
#include "meshtrain/train/tp_config.h"
#include "meshtrain/train/config_limits.h"
#include "meshtrain/train/ep_config.h"
#include "meshtrain/train/option_effects.h"
#include "meshtrain/train/resume_checks.h"
#include "meshtrain/train/toml_reader.h"

namespace meshtrain::train {

namespace {

void read_model(TomlSection s, model::ModelConfig& m) {
  model::for_each_model_field(m, [&](const model::FieldInfo& f, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_enum_v<T>) s.read_enum<T>(f.key, v, model::EnumNames<T>::list);
    else s.read(f.key, v);
  });
  s.finish();
}

void read_data(TomlSection s, DataConfig& d) {
  s.read("path", d.path);
  s.read("sources", d.sources);
  s.read("format", d.format);
  s.read("tokenizer", d.tokenizer);
  s.read("val_fraction", d.val_fraction);
  s.read("mode", d.mode);
  s.read("seq_len", d.seq_len);
  s.read("seed", d.seed);
  s.read("bucket_pool", d.bucket_pool);
  s.finish();
}

void read_training(TomlSection s, TrainingConfig& t) {
  s.read("steps", t.steps);
  s.read("stop_at", t.stop_at);
  s.read("micro_batch", t.micro_batch);
  s.read("grad_accum", t.grad_accum);
  s.read("eval_every", t.eval_every);
  s.read("eval_rows", t.eval_rows);
  s.read("precision", t.precision);
  s.read("grad_reduce_dtype", t.grad_reduce_dtype);
  s.read("reproducible", t.reproducible);
  s.read("reproducible_blocks", t.reproducible_blocks);
  s.read("loss_scale", t.loss_scale.initial);
  s.read("loss_scale_growth", t.loss_scale.growth_factor);
  s.read("loss_scale_backoff", t.loss_scale.backoff_factor);
  s.read("loss_scale_window", t.loss_scale.growth_interval);
  s.read("loss_scale_hysteresis", t.loss_scale.hysteresis);
  s.read("loss_scale_min", t.loss_scale.min_scale);
  s.read("recompute", t.recompute);
  s.read("head_chunk_rows", t.head_chunk_rows);
  s.read("threads", t.threads);
  s.read("check_memory", t.check_memory);
  s.finish();
}

void read_optimizer(TomlSection s, optim::OptimizerConfig& o) {
  s.read("lr", o.lr);
  s.read("min_lr", o.min_lr);
  s.read("beta1", o.beta1);
  s.read("beta2", o.beta2);
  s.read("eps", o.eps);
  s.read("weight_decay", o.weight_decay);
  s.read("grad_clip", o.grad_clip);
  s.read("warmup_steps", o.warmup_steps);
  s.read_enum("schedule", o.schedule,
              {{"cosine", optim::ScheduleKind::Cosine}, {"constant", optim::ScheduleKind::Constant},
               {"linear", optim::ScheduleKind::Linear}});
  s.finish();
}

void read_metrics(TomlSection s, MetricsConfig& m) {
  s.read("run_dir", m.run_dir);
  s.read("jsonl", m.jsonl);
  s.read("log_every", m.log_every);
  s.read("pipeline_timeline", m.pipeline_timeline);
  s.read("allow_nonempty_run_dir", m.allow_nonempty_run_dir);
  s.finish();
}

void read_parallel(TomlSection s, parallel::ParallelConfig& p) {
  s.read("dp", p.dp);
  s.read("zero_stage", p.zero_stage);
  s.read("reshard_after_forward", p.reshard_after_forward);
  s.read("bucket_mb", p.bucket_mb);
  s.read_enum("grad_reduce", p.grad_reduce,
              {{"sum", parallel::GradReduce::Sum}, {"avg", parallel::GradReduce::Avg}});
  s.read("overlap", p.overlap);
  s.read("tp", p.tp);
  s.read("sequence_parallel", p.sequence_parallel);
  s.read("tp_overlap", p.tp_overlap);
  s.read("pp", p.pp);
  s.read("schedule", p.schedule);
  s.read("virtual_stages", p.virtual_stages);
  s.read("pp_layers", p.pp_layers);
  s.read("keep_gathered", p.keep_gathered);
  s.read("replica_grad_accum", p.replica_grad_accum);
  s.read("cp", p.cp);
  s.read("ep", p.ep);
  s.finish();
}

void read_comm(TomlSection s, CommConfig& c) {
  s.read("backend", c.backend);
  s.read("timeout_s", c.timeout_s);
  s.read("check", c.check);
  s.read("straggler_factor", c.straggler_factor);
  s.read("heartbeat_timeout_s", c.heartbeat_timeout_s);
  s.read("restart_on_failure", c.restart_on_failure);
  s.read("max_restarts", c.max_restarts);
  s.read("elastic", c.elastic);
  s.read("min_ranks", c.min_ranks);
  s.read("allow_cross_node_tp", c.allow_cross_node_tp);
  s.read("hierarchical", c.hierarchical);
  s.read("hardware", c.hardware);
  s.finish();
}

void read_checkpoint(TomlSection s, CheckpointConfig& c) {
  s.read("dir", c.dir);
  s.read("every", c.every);
  s.read("keep_last", c.keep_last);
  s.read("async", c.async);
  s.read("resume", c.resume);
  s.read("init_from", c.init_from);
  s.read("allow_changes", c.allow_changes);
  s.read("weights_only", c.weights_only);
  s.finish();
}

const toml::table* section(const toml::table& root, const char* name) {
  const toml::node* n = root.get(name);
  if (!n) return nullptr;
  MT_REQUIRE(ConfigError, n->is_table(), "[", name, "] must be a table");
  return n->as_table();
}

}  // namespace

namespace {
// Uneven counts (docs/math.md (M.75)): grad_accum becomes the largest,
// equal counts the even form; what uneven counts cannot run is refused.
void settle_replica_counts(TrainConfig& c) {
  std::vector<int64_t>& counts = c.parallel.replica_grad_accum;
  if (counts.empty()) return;
  const int64_t largest = parallel::largest_micro_batches(counts, c.training.grad_accum);
  c.training.grad_accum = largest;
  if (std::all_of(counts.begin(), counts.end(), [&](int64_t g) { return g == largest; })) return counts.clear();
  MT_REQUIRE(ConfigError, c.parallel.ep == 1, "parallel.replica_grad_accum with parallel.ep = ", c.parallel.ep,
             ": the expert all-to-all runs once per micro-batch on every rank of an ep group, so its replicas "
             "need equal counts (give every replica the same count, or set parallel.ep = 1)");
  MT_REQUIRE(ConfigError, c.parallel.zero_stage < 3 || c.parallel.keep_gathered,
             "parallel.replica_grad_accum under parallel.zero_stage = 3 gathers each unit around every "
             "micro-batch's use, so replicas with different counts would wait on each other: set "
             "parallel.keep_gathered = true (one gather per unit and window) or use stage 0-2");
  for (const int64_t g : counts) parallel::check_pipeline(c.parallel, c.model, g);
}
}  // namespace

void TrainConfig::validate() {
  check_config_limits(*this);  // before anything is derived from the numbers
  model.finalize();
  optimizer.validate();
  MT_REQUIRE(ConfigError, !data.path.empty(), "data.path is required: the prepared dataset directory");
  MT_REQUIRE(ConfigError, data.mode == "packed" || data.mode == "padded", "data.mode = \"", data.mode,
             "\": expected \"packed\" or \"padded\"");
  MT_REQUIRE(ConfigError, data.format == "auto" || data.format == "text" || data.format == "jsonl" ||
                              data.format == "fortune",
             "data.format = \"", data.format, "\": expected auto, text, jsonl or fortune");
  MT_REQUIRE(ConfigError, data.val_fraction > 0 && data.val_fraction < 1, "data.val_fraction = ", data.val_fraction,
             ": expected 0 < f < 1");
  MT_REQUIRE(ConfigError, data.seq_len > 0, "data.seq_len = ", data.seq_len, ": expected > 0");
  MT_REQUIRE(ConfigError, data.seq_len <= model.max_seq_len, "data.seq_len = ", data.seq_len,
             " exceeds model.max_seq_len = ", model.max_seq_len);
  MT_REQUIRE(ConfigError, data.bucket_pool >= 1, "data.bucket_pool = ", data.bucket_pool, ": expected >= 1");
  MT_REQUIRE(ConfigError, training.steps >= 0, "training.steps = ", training.steps, ": expected >= 0");
  MT_REQUIRE(ConfigError, training.stop_at >= 0 && training.stop_at <= training.steps, "training.stop_at = ",
             training.stop_at, ": expected 0 <= stop_at <= training.steps = ", training.steps);
  MT_REQUIRE(ConfigError, training.micro_batch > 0, "training.micro_batch = ", training.micro_batch,
             ": expected > 0");
  MT_REQUIRE(ConfigError, training.grad_accum > 0, "training.grad_accum = ", training.grad_accum, ": expected > 0");
  MT_REQUIRE(ConfigError, training.eval_every >= 0, "training.eval_every = ", training.eval_every,
             ": expected >= 0");
  MT_REQUIRE(ConfigError, training.eval_rows >= 0, "training.eval_rows: expected >= 0");
  precision().validate();
  training.loss_scale.validate();
  MT_REQUIRE(ConfigError, training.head_chunk_rows >= 0, "training.head_chunk_rows = ", training.head_chunk_rows,
             ": expected >= 0 (0: the whole micro-batch's logits at once)");
  MT_REQUIRE(ConfigError, training.head_chunk_rows == 0 || !training.reproducible, "training.head_chunk_rows = ",
             training.head_chunk_rows, " sums the LM head's weight gradient chunk by chunk, but "
             "training.reproducible sums it over canonical token blocks of the whole micro-batch: set "
             "training.head_chunk_rows = 0, or training.reproducible = false");
  MT_REQUIRE(ConfigError, training.threads >= 0, "training.threads = ", training.threads, ": expected >= 0");
  parallel.validate();
  settle_replica_counts(*this);
  check_tensor_parallel_config(*this);
  check_context_parallel_config(*this);
  check_expert_parallel_config(*this);
  parallel::check_pipeline(parallel, model, training.grad_accum);
  // Reproducible mode closes a unit's gradient leaf after each micro-batch's
  // last write; a split backward interleaves two micro-batches' writes.
  if (training.reproducible && parallel.dp >= 1)  // dp = 0: the trainer checks with the world's
    check_reproducible_window(parallel.dp, parallel.cp, training.grad_accum, parallel.replica_grad_accum);
  MT_REQUIRE(ConfigError, !training.reproducible || !parallel::splits_backward(parallel.schedule),
             "training.reproducible sums each micro-batch's gradient as its own leaf, but parallel.schedule = ",
             parallel.schedule, " runs the next micro-batch's input gradient before this one's weight gradient: "
             "use gpipe, 1f1b or interleaved");
  MT_REQUIRE(ConfigError, comm.backend == "threads" || comm.backend == "mpi", "comm.backend = \"", comm.backend,
             "\": expected \"threads\" or \"mpi\"");
  MT_REQUIRE(ConfigError, comm.timeout_s > 0, "comm.timeout_s = ", comm.timeout_s, ": expected > 0");
  meshtrain::comm::parse_hierarchical_mode(comm.hierarchical);  // ConfigError naming the key
  MT_REQUIRE(ConfigError, comm.straggler_factor == 0 || comm.straggler_factor > 1, "comm.straggler_factor = ",
             comm.straggler_factor, ": expected 0 (off) or a factor > 1 (a rank whose compute time per step is at "
             "least that many times the median rank's, for a few steps in a row, is named a straggler)");
  MT_REQUIRE(ConfigError, comm.heartbeat_timeout_s == -1 || comm.heartbeat_timeout_s >= 0,
             "comm.heartbeat_timeout_s = ", comm.heartbeat_timeout_s,
             ": expected seconds (below comm.timeout_s), 0 (off) or -1 (comm.timeout_s / 5, the default)");
  MT_REQUIRE(ConfigError, comm.heartbeat_timeout_s <= 0 || comm.heartbeat_timeout_s < comm.timeout_s,
             "comm.heartbeat_timeout_s = ", comm.heartbeat_timeout_s, " is not below comm.timeout_s = ",
             comm.timeout_s, ": the heartbeat must name a hung rank before the collective timeout ends the job. "
             "Lower it, raise comm.timeout_s, or set comm.heartbeat_timeout_s = 0 to turn heartbeats off");
  MT_REQUIRE(ConfigError, !comm.elastic || parallel.dp >= 1, "comm.elastic keeps the global window of parallel.dp x "
             "training.grad_accum micro-batches while dp changes: set parallel.dp (not 0) to the layout's starting dp");
  MT_REQUIRE(ConfigError, checkpoint.every >= 0, "checkpoint.every = ", checkpoint.every, ": expected >= 0");
  MT_REQUIRE(ConfigError, checkpoint.keep_last >= 1, "checkpoint.keep_last = ", checkpoint.keep_last,
             ": expected >= 1 (the newest complete checkpoint is always kept)");
  MT_REQUIRE(ConfigError, !metrics.run_dir.empty(),
             "metrics.run_dir is empty: name the run's directory (e.g. runs/demo)");
  MT_REQUIRE(ConfigError, metrics.log_every > 0, "metrics.log_every = ", metrics.log_every, ": expected > 0");
  validate_allow_changes(checkpoint.allow_changes);
}

void check_reproducible_window(int64_t dp, int64_t cp, int64_t grad_accum,
                               const std::vector<int64_t>& replica_grad_accum) {
  std::string split;
  int64_t leaves = cp;
  if (replica_grad_accum.empty()) {
    split = cp > 1 ? detail::concat("dp x cp x grad_accum = ", dp, " x ", cp, " x ", grad_accum)
                   : detail::concat("dp x grad_accum = ", dp, " x ", grad_accum);
    leaves *= dp * grad_accum;
  } else {
    const std::string counts = parallel::describe_grad_accum(replica_grad_accum, grad_accum, " + ");
    split = cp > 1 ? detail::concat("cp x the sum of parallel.replica_grad_accum = ", cp, " x (", counts, ")")
                   : "the sum of parallel.replica_grad_accum = " + counts;
    leaves *= parallel::window_micro_batches(dp, replica_grad_accum, grad_accum);
  }
  MT_REQUIRE(ConfigError, leaves > 0 && (leaves & (leaves - 1)) == 0, "training.reproducible sums the window's "
             "micro-batches in a binary tree: ", split, " = ", leaves, " must be a power of two");
}

std::string CheckpointConfig::resolved_dir(const std::string& run_dir) const {
  return dir.empty() ? (std::filesystem::path(run_dir) / "checkpoints").string() : dir;
}

TrainConfig parse_config(const std::string& toml_text, const std::vector<std::string>& overrides,
                         const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    MT_THROW(ConfigError, source, ":", b.line, ":", b.column, ": ", e.description());
  }
  for (const auto& o : overrides) apply_override(root, o);
  const std::vector<std::string> sections = {"model",   "data",     "training", "optimizer",
                                              "metrics", "parallel", "comm",     "checkpoint"};
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    MT_REQUIRE(ConfigError, std::find(sections.begin(), sections.end(), key) != sections.end(), "unknown section [",
               key, "] in ", source, did_you_mean(key, sections),
               " (known: model, data, training, optimizer, metrics, parallel, comm, checkpoint)");
  }
  TrainConfig cfg;
  read_model(TomlSection(section(root, "model"), "model"), cfg.model);
  read_data(TomlSection(section(root, "data"), "data"), cfg.data);
  read_training(TomlSection(section(root, "training"), "training"), cfg.training);
  read_optimizer(TomlSection(section(root, "optimizer"), "optimizer"), cfg.optimizer);
  read_metrics(TomlSection(section(root, "metrics"), "metrics"), cfg.metrics);
  read_parallel(TomlSection(section(root, "parallel"), "parallel"), cfg.parallel);
  read_comm(TomlSection(section(root, "comm"), "comm"), cfg.comm);
  read_checkpoint(TomlSection(section(root, "checkpoint"), "checkpoint"), cfg.checkpoint);
  const auto& counts = cfg.parallel.replica_grad_accum;
  if (!counts.empty() && root["training"]["grad_accum"]) {
    const int64_t largest = parallel::largest_micro_batches(counts, 0);
    MT_REQUIRE(ConfigError, cfg.training.grad_accum == largest, "training.grad_accum = ", cfg.training.grad_accum,
               " but the largest of parallel.replica_grad_accum is ", largest,
               ": with a count per replica, grad_accum is their largest (leave it out)");
  }
  cfg.validate();
  check_options_take_effect(cfg);  // what a user wrote must do something
  return cfg;
}

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  MT_REQUIRE(ConfigError, !fs::is_directory(st), "config file '", path,
             "' is a directory; give the TOML file (e.g. configs/demo.toml)");
  // A device (/dev/zero) or a pipe could be read without end.
  MT_REQUIRE(ConfigError, !fs::exists(st) || fs::is_regular_file(st), "config file '", path,
             "' is not a regular file; give the TOML file (e.g. configs/demo.toml)");
  constexpr uintmax_t kMaxConfigBytes = uintmax_t(16) << 20;
  MT_REQUIRE(ConfigError, !fs::exists(st) || fs::file_size(path, ec) <= kMaxConfigBytes, "config file '", path,
             "' is larger than 16 MiB: not a training config");
  std::ifstream in(path);
  MT_REQUIRE(ConfigError, in.good(), "cannot read config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), overrides, path);
}

}  // namespace meshtrain::train
