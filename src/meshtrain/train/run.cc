#include "meshtrain/train/run.h"

#include <filesystem>
#include <memory>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/data/stats.h"
#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/progress.h"
#include "meshtrain/train/timeline_json.h"

namespace meshtrain::train {

namespace {

void print_header(const Trainer& t, std::FILE* console, MetricsWriter& writer) {
  const TrainConfig& cfg = t.config();
  // The whole model's count (this rank's spec holds its tensor-parallel slice).
  const int64_t params = model::build_model_spec(cfg.model).total_params();
  std::fprintf(console, "model: %s | %.2fM parameters | %.1f MFLOP/token\n", cfg.model.describe().c_str(),
               double(params) * 1e-6, t.flops_per_token() * 1e-6);
  const int dp = t.dp_size();
  std::fprintf(console, "precision: %s%s\n", t.precision().describe().c_str(),
               t.loss_scaler().enabled() ? " | dynamic loss scaling" : "");
  std::fprintf(console,
               "layout: %s backend, dp=%d, tp=%d%s, zero_stage=%d, grad_reduce=%s | %d compute threads per rank | "
               "global window %lld rows x %lld (G=%lld, micro-batch %lld) | %s\n",
               cfg.comm.backend.c_str(), dp, cfg.parallel.tp, cfg.parallel.sequence_parallel ? " (sequence parallel)" : "",
               cfg.parallel.zero_stage, parallel::to_string(cfg.parallel.grad_reduce),
               compute_threads(), static_cast<long long>(cfg.training.micro_batch * cfg.training.grad_accum * dp),
               static_cast<long long>(cfg.data.seq_len), static_cast<long long>(cfg.training.grad_accum),
               static_cast<long long>(cfg.training.micro_batch), cfg.data.mode.c_str());
  if (cfg.parallel.pp > 1) std::fputs(t.pipeline_description().c_str(), console);
  if (const data::TokenDataset* val = t.validation_data()) {
    const double h = data::unigram_entropy(*val);
    std::fprintf(console, "validation: %lld documents, %lld tokens | unigram entropy baseline %.4f nats/token\n",
                 static_cast<long long>(val->num_documents()), static_cast<long long>(val->num_tokens()), h);
    writer.write({{"event", "baseline"}, {"unigram_entropy", h}});
  }
}

}  // namespace

void run_training(Trainer& t, std::FILE* console) {
  const TrainConfig& cfg = t.config();
  const std::string resumed = t.resume_or_init();
  if (console && !resumed.empty()) std::fprintf(console, "%s\n", resumed.c_str());
  std::unique_ptr<MetricsWriter> writer;
  std::unique_ptr<TrainProgress> progress;  // log lines above a live status line
  if (console) {
    std::filesystem::create_directories(cfg.metrics.run_dir);
    writer = std::make_unique<MetricsWriter>(
        cfg.metrics.jsonl.empty() ? std::string()
                                  : (std::filesystem::path(cfg.metrics.run_dir) / cfg.metrics.jsonl).string());
    print_header(t, console, *writer);
    progress = std::make_unique<TrainProgress>(t, console, *writer);
    std::fflush(console);
  }
  const int64_t total = cfg.training.steps;
  const int64_t stop = cfg.training.stop_at > 0 ? cfg.training.stop_at : total;
  if (console && t.steps_done() >= stop)
    std::fprintf(console, "nothing to train: at step %lld of %lld\n", static_cast<long long>(t.steps_done()),
                 static_cast<long long>(stop));
  while (t.steps_done() < stop) {
    StepMetrics m = t.step();
    const bool eval_now = t.validation_data() &&
                          ((cfg.training.eval_every > 0 && m.step % cfg.training.eval_every == 0) || m.step == total);
    EvalResult e;
    if (eval_now) e = t.evaluate();
    const int64_t every = cfg.checkpoint.every;
    const bool save_now = every > 0 && (m.step % every == 0 || m.step == stop);
    if (save_now) t.save_checkpoint();
    if (!console) continue;
    if (save_now)
      progress->log("checkpoint step " + std::to_string(m.step) + " -> " +
                    cfg.checkpoint.resolved_dir(cfg.metrics.run_dir) + (cfg.checkpoint.async ? " (async)" : ""));
    writer->write(m.to_json());
    const bool log_now = m.step % cfg.metrics.log_every == 0 || m.step == total;
    if (cfg.metrics.pipeline_timeline && log_now && !t.pipeline_timeline().stages.empty())
      writer->write(timeline_record(m.step, t.pipeline_timeline(), m.pipeline_bubble_formula));
    if (log_now || m.skipped) progress->log(m.console_line(total));
    if (eval_now) {
      char line[160];
      std::snprintf(line, sizeof line, "eval step %lld | val loss %.4f nats/token, %.4f bits/byte over %lld targets",
                    static_cast<long long>(m.step), e.loss, e.bits_per_byte(), static_cast<long long>(e.targets));
      progress->log(line);
      writer->write({{"event", "eval"},
                     {"step", m.step},
                     {"val_loss", e.loss},
                     {"val_loss_sum", e.loss_sum},
                     {"targets", e.targets},
                     {"target_bytes", e.target_bytes},
                     {"val_bits_per_byte", e.bits_per_byte()}});
    }
    progress->step_done(m);
  }
  if (progress) progress->finish();
  t.finish_checkpoints();
}

comm::MeshShape mesh_for(const TrainConfig& cfg, int world_size) {
  comm::MeshShape m;
  m.tp = cfg.parallel.tp;  // innermost: the chattiest group on the closest ranks
  m.pp = cfg.parallel.pp;
  m.dp = cfg.parallel.dp;
  if (m.dp == 0) {
    m.dp = 1;
    MT_REQUIRE(ConfigError, world_size % m.world_size() == 0, "world size ", world_size,
               " is not a multiple of the other axes (", m.str(), " without dp = ", m.world_size(), ")");
    m.dp = world_size / m.world_size();
  }
  MT_REQUIRE(ConfigError, m.world_size() == world_size, "the layout needs ", m.str(), " = ", m.world_size(),
             " ranks but the world has ", world_size,
             " (set parallel.dp to match, or parallel.dp = 0 to take dp from the world size)");
  return m;
}

void train_main(const TrainConfig& cfg) {
  comm::LaunchOptions o;
  o.backend = comm::parse_backend(cfg.comm.backend);
  o.group.timeout = comm::Millis(int64_t(cfg.comm.timeout_s * 1000));
  o.group.check = cfg.comm.check;
  o.seed = cfg.model.seed;
  if (o.backend == comm::Backend::Threads) {
    MT_REQUIRE(ConfigError, cfg.parallel.dp >= 1,
               "parallel.dp = 0 (take dp from the world size) needs the mpi backend; the threads backend starts "
               "exactly the ranks the layout asks for");
    o.mesh = mesh_for(cfg, cfg.parallel.dp * cfg.parallel.tp * cfg.parallel.pp);
    o.world_size = o.mesh.world_size();
  } else {
    o.mesh_from_world = [&cfg](int world) { return mesh_for(cfg, world); };
  }
  comm::launch(o, [&](comm::ParallelContext& ctx) {
    TrainConfig rank_cfg = cfg;
    rank_cfg.parallel.dp = ctx.mesh.shape().dp;
    if (cfg.training.threads > 0) set_compute_threads(cfg.training.threads);
    if (ctx.rank == 0) ensure_prepared(cfg.data);
    ctx.world->barrier();
    auto train = data::TokenDataset::open(cfg.data.path, "train");
    std::optional<data::TokenDataset> val;
    if (std::filesystem::exists(std::filesystem::path(cfg.data.path) / "val.bin"))
      val = data::TokenDataset::open(cfg.data.path, "val");
    Trainer t(rank_cfg, ctx, std::move(train), std::move(val));
    run_training(t, ctx.rank == 0 ? stdout : nullptr);
  });
}

}  // namespace meshtrain::train
