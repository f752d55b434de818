#include "meshtrain/train/run.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "meshtrain/comm/launch.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/node_placement.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/core/memory_limits.h"
#include "meshtrain/core/rank_activity.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/data/stats.h"
#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/elastic.h"
#include "meshtrain/train/heartbeat.h"
#include "meshtrain/train/live_state.h"
#include "meshtrain/train/progress.h"
#include "meshtrain/train/run_dir.h"
#include "meshtrain/train/run_memory.h"
#include "meshtrain/train/timeline_json.h"
#include "meshtrain/train/stop_signal.h"

namespace meshtrain::train {

namespace {

void print_header(const Trainer& t, std::FILE* console, MetricsWriter& writer) {
  const TrainConfig& cfg = t.config();
  const int64_t params = whole_model_parameters(cfg);
  std::fprintf(console, "model: %s | %.2fM parameters | %.1f MFLOP/token\n", cfg.model.describe().c_str(),
               double(params) * 1e-6, t.flops_per_token() * 1e-6);
  const int dp = t.dp_size();
  std::fprintf(console, "precision: %s%s\n", t.precision().describe().c_str(),
               t.loss_scaler().enabled() ? " | dynamic loss scaling" : "");
  std::fprintf(console,
               "layout: %s backend, dp=%d, cp=%d, tp=%d%s, zero_stage=%d, grad_reduce=%s | %d compute threads per rank | "
               "global window %lld rows x %lld (G=%s, micro-batch %lld) | %s\n",
               cfg.comm.backend.c_str(), dp, cfg.parallel.cp, cfg.parallel.tp, cfg.parallel.sequence_parallel ? " (sequence parallel)" : "",
               cfg.parallel.zero_stage, parallel::to_string(cfg.parallel.grad_reduce),
               compute_threads(), static_cast<long long>(t.window_rows()), static_cast<long long>(cfg.data.seq_len),
               parallel::describe_grad_accum(cfg.parallel.replica_grad_accum, cfg.training.grad_accum).c_str(),
               static_cast<long long>(cfg.training.micro_batch), cfg.data.mode.c_str());
  if (cfg.training.threads == 0) {
    const CoreLoad load = core_load();
    std::fprintf(console,
                 "compute threads: %d per rank by default: %d core(s), %.1f busy with other processes at start "
                 "(training.threads sets it; docs/performance.md, \"Shared cores\")\n",
                 compute_threads(), load.cores, load.busy);
  }
  if (cfg.parallel.pp > 1) std::fputs(t.pipeline_description().c_str(), console);
  if (const std::string nodes = comm::describe_nodes(t.context().host_of_rank); !nodes.empty())
    std::fprintf(console, "placement: %s (tp and cp inside a node, dp and pp across)\n", nodes.c_str());
  std::fputs(t.training_step().hierarchy_note().c_str(), console);
  if (const data::TokenDataset* val = t.validation_data()) {
    const double h = data::unigram_entropy(*val);
    std::fprintf(console, "validation: %lld documents, %lld tokens | unigram entropy baseline %.4f nats/token\n",
                 static_cast<long long>(val->num_documents()), static_cast<long long>(val->num_tokens()), h);
    writer.write({{"event", "baseline"}, {"unigram_entropy", h}});
  }
}

// Rank 0's log and metrics around the loop.
struct RunLog {
  std::FILE* console = nullptr;
  std::unique_ptr<MetricsWriter> writer;
  std::unique_ptr<TrainProgress> progress;  // log lines above a live status line
  std::string committed;  // the last committed checkpoint reported

  void line(const std::string& s) const {
    if (!console) return;
    if (progress) return progress->log(s);
    std::fprintf(console, "%s\n", s.c_str());
    std::fflush(console);
  }
  void finish() {
    if (progress) progress->finish();
  }
  // Async saves commit later: say so when they do, not when they start.
  void report_commit(const Trainer& t) {
    const auto* a = t.async_checkpointer();
    if (!console || !a || a->last_committed().empty() || a->last_committed() == committed) return;
    committed = a->last_committed();
    line("checkpoint committed -> " + committed);
  }
};

// Every rank's step times into the step's record; on rank 0, stragglers
// named and changes logged (docs/comm.md, "Stragglers and hangs").
void time_ranks(Trainer& t, StepMetrics& m, StragglerWatch* watch, const RunLog& log) {
  m.ranks = gather_rank_times(*t.context().world, m.seconds, m.collective_s);
  if (!watch) return;
  std::vector<std::string> changes;
  m.stragglers = watch->observe(m.ranks, changes);
  for (const std::string& line : changes) log.line(line);
}

std::optional<Heartbeat> start_heartbeat(Trainer& t, const activity::RankActivity& mine,
                                         const std::vector<std::string>& hosts) {
  const CommConfig& c = t.config().comm;
  if (c.heartbeat_s() <= 0) return std::nullopt;
  HeartbeatOptions o;
  o.timeout_s = c.heartbeat_s();
  o.collective_timeout_s = c.timeout_s;
  o.dir = (std::filesystem::path(t.config().metrics.run_dir) / kHeartbeatDir).string();
  return std::optional<Heartbeat>(std::in_place, *t.context().world, mine, hosts, std::move(o));
}

// After a resume at step `step`: drop the metrics of the steps that will run
// again, and log a restart with the work it lost.
void resume_metrics(const Trainer& t, const RestartInfo& restart, RunLog& log) {
  const TrainConfig& cfg = t.config();
  const std::string path =
      cfg.metrics.jsonl.empty() ? std::string() : (std::filesystem::path(cfg.metrics.run_dir) / cfg.metrics.jsonl).string();
  const int64_t last = truncate_metrics_after(path, t.steps_done());
  log.writer = std::make_unique<MetricsWriter>(path);
  const int64_t lost = std::max<int64_t>(0, last - t.steps_done());
  // From the end of the last launch to this one ready to train.
  const double recovery_s = restart.ended_at_s > 0 ? std::max(0.0, wall_clock_s() - restart.ended_at_s) : -1;
  char recovered[64] = "";
  if (recovery_s >= 0) std::snprintf(recovered, sizeof recovered, ", ready again in %.2f s", recovery_s);
  if (!restart.layout_change.empty()) {
    log.line("membership: " + restart.layout_change + " at step " + std::to_string(t.steps_done()) + ", " +
             std::to_string(lost) + " step(s) lost" + recovered +
             (restart.reason.empty() ? "" : " (" + restart.reason + ")"));
    const ElasticLayout now = current_layout(cfg);
    log.writer->write({{"event", "membership"},
                       {"change", restart.layout_change},
                       {"ranks", now.ranks},
                       {"dp", now.dp},
                       {"grad_accum", now.grad_accum},
                       {"replica_grad_accum", now.replica_grad_accum},
                       {"layout", now.describe()},
                       {"resumed_step", t.steps_done()},
                       {"lost_steps", lost},
                       {"recovery_s", recovery_s},
                       {"reason", restart.reason.empty() ? "capacity changed" : restart.reason}});
  }
  if (restart.index == 0 || restart.reason.empty()) return;
  log.line("restart " + std::to_string(restart.index) + " of " + std::to_string(restart.max) + ": resumed at step " +
           std::to_string(t.steps_done()) + ", " + std::to_string(lost) + " step(s) since that checkpoint lost" +
           recovered + " (" + restart.reason + ")");
  log.writer->write({{"event", "restart"},
                     {"restart", restart.index},
                     {"max_restarts", restart.max},
                     {"resumed_step", t.steps_done()},
                     {"failed_after_step", std::max(last, t.steps_done())},
                     {"lost_steps", lost},
                     {"recovery_s", recovery_s},
                     {"reason", restart.reason}});
}

// Rank 0 of an elastic job at a step boundary: the rank count of the layout
// the capacity file allows when it differs from this one, else 0. A capacity
// file that cannot be read is said once and changes nothing.
int32_t capacity_change(const TrainConfig& cfg, int world_size, const RunLog& log) {
  static std::string said;
  try {
    const int capacity = read_capacity(cfg, world_size);
    if (capacity == world_size) return 0;
    const std::optional<ElasticLayout> l = largest_layout(cfg, capacity);
    return l && l->ranks != world_size ? l->ranks : 0;
  } catch (const ConfigError& e) {
    if (said != e.what()) log.line(std::string("warning: ") + e.what() + "; the job continues at its layout");
    said = e.what();
    return 0;
  }
}

// After each step, every rank the same answer (one pair of flags reduced:
// a signal; an elastic job's new rank count): stop (a signal asked), change
// the layout (the capacity file asks, and steps are left), or go on.
std::optional<RunEnd> agreed_end(Trainer& t, int64_t step, int64_t stop, const RunLog& log) {
  const TrainConfig& cfg = t.config();
  int32_t flags[2] = {StopSignals::received(), 0};
  if (flags[0] == 0 && log.console) flags[0] = StopSignals::relayed();
  if (log.console && cfg.comm.elastic) flags[1] = capacity_change(cfg, t.context().world_size, log);
  t.context().world->all_reduce(flags, 2, DType::I32, comm::ReduceOp::Max);
  if (flags[0] != 0) {
    StopSignals::agree(flags[0]);
    return RunEnd::Stopped;
  }
  if (flags[1] > 0 && step < stop) return RunEnd::Regrow;
  return std::nullopt;
}

}  // namespace

RunEnd run_training(Trainer& t, std::FILE* console, const RestartInfo& restart) {
  const TrainConfig& cfg = t.config();
  activity::RankActivity activity;  // what this rank does, for its heartbeat and its step times
  const activity::Bind bind(&activity);
  const std::string resumed = t.resume_or_init();
  RunLog log;
  log.console = console;
  if (console) {
    if (!resumed.empty()) log.line(resumed);
    std::filesystem::create_directories(cfg.metrics.run_dir);
    resume_metrics(t, restart, log);
    print_header(t, console, *log.writer);
    log.progress = std::make_unique<TrainProgress>(t, console, *log.writer);
    if (!t.validation_data()) log.line("validation: no validation split (empty or absent): no evaluation");
    std::fflush(console);
  }
  const int64_t total = cfg.training.steps;
  const int64_t stop = cfg.training.stop_at > 0 ? cfg.training.stop_at : total;
  if (t.steps_done() >= stop)
    log.line("nothing to train: at step " + std::to_string(t.steps_done()) + " of " + std::to_string(stop));
  const std::string ckpt_dir = cfg.checkpoint.resolved_dir(cfg.metrics.run_dir);
  const std::vector<std::string> hosts = gather_hosts(*t.context().world);
  std::optional<StragglerWatch> stragglers;
  if (console) stragglers.emplace(cfg.comm.straggler_factor, hosts);
  std::optional<Heartbeat> heartbeat = start_heartbeat(t, activity, hosts);
  int64_t ran = 0, skipped = 0, saved_at = -1;
  std::string skip_reason;
  while (t.steps_done() < stop) {
    StepMetrics m = t.step();
    time_ranks(t, m, stragglers ? &*stragglers : nullptr, log);
    ++ran;
    if (m.skipped) ++skipped, skip_reason = m.skip_reason;
    const bool eval_now = t.validation_data() &&
                          ((cfg.training.eval_every > 0 && m.step % cfg.training.eval_every == 0) || m.step == total);
    EvalResult e;
    if (eval_now) {
      activity::mark("evaluation");
      e = t.evaluate();
    }
    if (console) {
      log.writer->write(m.to_json());
      const bool log_now = m.step % cfg.metrics.log_every == 0 || m.step == total;
      if (cfg.metrics.pipeline_timeline && log_now && !t.pipeline_timeline().stages.empty())
        log.writer->write(timeline_record(m.step, t.pipeline_timeline(), m.pipeline_bubble_formula));
      if (log_now || m.skipped) log.line(m.console_line(total));
      if (eval_now) {
        char line[160];
        std::snprintf(line, sizeof line, "eval step %lld | val loss %.4f nats/token, %.4f bits/byte over %lld targets",
                      static_cast<long long>(m.step), e.loss, e.bits_per_byte(), static_cast<long long>(e.targets));
        log.line(line);
        log.writer->write({{"event", "eval"},
                           {"step", m.step},
                           {"val_loss", e.loss},
                           {"val_loss_sum", e.loss_sum},
                           {"targets", e.targets},
                           {"target_bytes", e.target_bytes},
                           {"val_bits_per_byte", e.bits_per_byte()}});
      }
      log.progress->step_done(m);
    }
    // After the step's records: a crash between its commit and its records
    // would lose them for good (a resume from an earlier checkpoint drops
    // records written before a commit that never happened).
    fault::point("metrics.written");
    const int64_t every = cfg.checkpoint.every;
    if (every > 0 && (m.step % every == 0 || m.step == stop)) {
      activity::mark("checkpoint save");
      t.save_checkpoint();
      saved_at = m.step;
      log.line(cfg.checkpoint.async ? "checkpoint step " + std::to_string(m.step) + " staged, writing in the background"
                                    : "checkpoint step " + std::to_string(m.step) + " -> " + ckpt_dir);
    }
    log.report_commit(t);
    if (const std::optional<RunEnd> end = agreed_end(t, m.step, stop, log)) {
      heartbeat.reset();
      if (saved_at != m.step) t.save_checkpoint();
      t.finish_checkpoints();
      log.report_commit(t);
      if (*end == RunEnd::Regrow) {
        fault::point("elastic.change");
        log.line("capacity changed after step " + std::to_string(m.step) + ": checkpoint saved, continuing at the "
                 "new layout");
      } else {
        log.line(std::string("stopped by ") + StopSignals::name(StopSignals::received()) + " after step " +
                 std::to_string(m.step) + ": checkpoint saved in " + ckpt_dir + "; run the same command again to resume");
      }
      log.finish();
      return *end;
    }
  }
  heartbeat.reset();  // every rank passed the last step's stop check: none is watched any more
  log.finish();
  t.finish_checkpoints();
  log.report_commit(t);
  MT_REQUIRE(TrainingError, ran == 0 || skipped < ran, "every one of the ", ran,
             " steps this run took was skipped (last reason: ", skip_reason,
             "): nothing was trained. Check the data (supervised targets) and the optimizer settings");
  MT_REQUIRE(TrainingError, !log.writer || !log.writer->failed(), "metrics file ",
             log.writer ? log.writer->path() : "", " could not be written: ",
             log.writer ? log.writer->lost_records() : 0, " record(s) lost (the checkpoints are complete)");
  return RunEnd::Finished;
}

comm::MeshShape mesh_for(const TrainConfig& cfg, int world_size) {
  comm::MeshShape m;
  m.tp = cfg.parallel.tp;  // innermost: the chattiest group on the closest ranks
  m.pp = cfg.parallel.pp;
  m.cp = cfg.parallel.cp;
  m.dp = cfg.parallel.dp;
  m.ep = cfg.parallel.ep;
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

namespace {

// One launch of the job's ranks; the end of rank 0's run.
RunEnd launch_once(const TrainConfig& cfg, const comm::LaunchOptions& o, const RestartInfo& restart) {
  RunEnd end = RunEnd::Finished;
  comm::launch(o, [&](comm::ParallelContext& ctx) {
    TrainConfig rank_cfg = cfg;
    rank_cfg.parallel.dp = ctx.mesh.shape().dp;
    std::FILE* console = ctx.rank == 0 ? stdout : nullptr;
    // Ranks sharing this machine's memory and cores.
    const int here = o.backend == comm::Backend::Threads ? ctx.world_size : comm::local_ranks(ctx);
    if (o.backend == comm::Backend::Mpi) check_rank_memory(rank_cfg, ctx.rank, here, console);
    if (cfg.training.threads > 0) {
      // More threads than the cores this process may use only slow it down.
      const int cap = std::max(1, hardware_cores() / here);
      if (cfg.training.threads > cap && console)
        std::fprintf(console, "warning: training.threads = %d exceeds the %d core(s) per rank this process may use "
                     "(%d core(s), %d rank(s) here): using %d\n", cfg.training.threads, cap, hardware_cores(), here, cap);
      set_compute_threads(std::min(cfg.training.threads, cap));
    }
    std::optional<RunDirectoryLock> lock;  // rank 0's, for the whole run
    if (ctx.rank == 0) {
      check_run_directory(cfg);  // before anything is written
      lock.emplace(cfg.metrics.run_dir);
      ensure_prepared(cfg.data);
    }
    ctx.world->barrier();
    auto train = data::TokenDataset::open(cfg.data.path, "train");
    std::optional<data::TokenDataset> val;
    if (std::filesystem::exists(std::filesystem::path(cfg.data.path) / "val.bin"))
      val = data::TokenDataset::open(cfg.data.path, "val");
    Trainer t(rank_cfg, ctx, std::move(train), std::move(val));
    RunEnd mine = RunEnd::Finished;
    try {
      mine = run_training(t, console, restart);
    } catch (const CommError& e) {
      // Another rank's failure seen from here (aborted or timed out): an
      // elastic threads job keeps this rank's state (live_state.h).
      const bool peer_failed = dynamic_cast<const CommAborted*>(&e) || dynamic_cast<const CommTimeout*>(&e);
      if (peer_failed && cfg.comm.elastic && o.backend == comm::Backend::Threads) write_live_state(t, ctx.rank);
      throw;
    }
    if (ctx.rank == 0) end = mine;
  });
  return end;
}

}  // namespace

namespace {

// The launch options of one launch of `cfg` (its layout: an elastic job's
// changes between launches).
comm::LaunchOptions launch_options(const TrainConfig& cfg) {
  comm::LaunchOptions o;
  o.backend = comm::parse_backend(cfg.comm.backend);
  o.group.timeout = comm::Millis(int64_t(cfg.comm.timeout_s * 1000));
  o.group.check = cfg.comm.check;
  o.allow_cross_node_groups = cfg.comm.allow_cross_node_tp;
  o.seed = cfg.model.seed;
  if (o.backend == comm::Backend::Threads) {
    MT_REQUIRE(ConfigError, cfg.parallel.dp >= 1,
               "parallel.dp = 0 (take dp from the world size) needs the mpi backend; the threads backend starts "
               "exactly the ranks the layout asks for");
    o.mesh = mesh_for(cfg, cfg.parallel.dp * cfg.parallel.cp * cfg.parallel.tp * cfg.parallel.pp);
    o.world_size = o.mesh.world_size();
  } else {
    o.mesh_from_world = [&cfg](int world) { return mesh_for(cfg, world); };
  }
  return o;
}

// After an elastic threads job's failure: the survivors' live state of their
// last step, committed as its checkpoint when it is complete (live_state.h).
void resume_from_live_state(const TrainConfig& cfg) {
  const LiveStateCommit c =
      commit_live_state(cfg.checkpoint.resolved_dir(cfg.metrics.run_dir), cfg.checkpoint.keep_last);
  if (!c.committed.empty())
    std::fprintf(stderr, "meshtrain: the state of step %lld from %d live rank(s) committed as %s\n",
                 static_cast<long long>(c.step), c.ranks, c.committed.c_str());
  else if (!c.why_not.empty())
    std::fprintf(stderr, "meshtrain: the live ranks' state is not complete (%s): resuming from the latest "
                 "checkpoint\n", c.why_not.c_str());
}

// An elastic threads-backend job's layout for `capacity` ranks, with the
// change recorded in `restart` when it differs from `now`'s.
TrainConfig change_layout(const TrainConfig& now, int capacity, const std::string& why, RestartInfo& restart) {
  const ElasticLayout to = shrink_or_grow(now, capacity, why);
  restart.layout_change = describe_change(current_layout(now), to);
  return restart.layout_change.empty() ? now : at_layout(now, to);
}

}  // namespace

int train_main(const TrainConfig& cfg) {
  const bool threads = comm::parse_backend(cfg.comm.backend) == comm::Backend::Threads;
  const bool elastic = cfg.comm.elastic && threads;  // under mpirun `meshtrain launch --elastic` changes the layout
  const int max_restarts = cfg.comm.restart_on_failure || cfg.comm.elastic ? cfg.comm.max_restarts : 0;
  RestartInfo restart = restart_info_from_environment();
  if (!threads && max_restarts > 0 && !std::getenv("MESHTRAIN_MAX_RESTARTS") && comm::launched_by_mpirun() &&
      std::getenv("OMPI_COMM_WORLD_RANK") && std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")) == 0)
    std::fprintf(stderr, "meshtrain: note: under mpirun a failed job is restarted by `meshtrain launch`, which runs "
                 "mpirun again; started directly, comm.restart_on_failure cannot restart it\n");
  TrainConfig now = cfg;
  if (elastic) now = change_layout(cfg, read_capacity(cfg, current_layout(cfg).ranks), "capacity", restart);
  StopSignals signals;
  for (;;) {
    std::vector<int> failed;
    comm::LaunchOptions o = launch_options(now);
    if (threads) check_run_memory(now, stdout);  // before anything is allocated
    o.failed_ranks = &failed;
    try {
      const RunEnd end = launch_once(now, o, restart);
      restart.ended_at_s = wall_clock_s();
      if (end == RunEnd::Regrow && !threads) return kRelayoutExitCode;  // `meshtrain launch` relaunches it
      if (end == RunEnd::Regrow) {
        restart.reason.clear();
        now = change_layout(now, read_capacity(now, current_layout(now).ranks), "capacity changed", restart);
        continue;
      }
      return end == RunEnd::Stopped ? 128 + StopSignals::received() : 0;
    } catch (const std::exception& e) {
      // Under mpirun the job is gone with the failed rank; `meshtrain launch`
      // restarts it. The threads backend restarts here.
      if (!threads || restart.index >= max_restarts || !restartable(e)) throw;
      restart = RestartInfo{restart.index + 1, max_restarts, e.what(), "", wall_clock_s()};
      std::fprintf(stderr, "meshtrain: the job failed: %s\nmeshtrain: restart %d of %d from the latest complete "
                   "checkpoint\n", e.what(), restart.index, max_restarts);
      std::fflush(stderr);
      if (elastic) {
        resume_from_live_state(now);
        const int left = current_layout(now).ranks - int(failed.size());
        now = change_layout(now, std::min(left, read_capacity(now, left)),
                            detail::concat(failed.size(), " rank(s) lost"), restart);
      }
    }
  }
}

}  // namespace meshtrain::train
