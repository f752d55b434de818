#include "meshtrain/train/progress.h"

#include <algorithm>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

nlohmann::json precision_json(const Trainer& t) {
  const PrecisionPolicy& p = t.precision();
  auto name = [](DType d) { return std::string(dtype_name(d)); };
  return {{"params", name(p.params)},         {"compute", name(p.compute)},
          {"grad_accumulate", name(p.grad_accum)}, {"grad_reduce", name(p.grad_reduce)},
          {"master", name(p.master)},         {"optimizer_state", name(p.optimizer)}};
}

int64_t whole_model_parameters(const TrainConfig& cfg) { return model::build_model_spec(cfg.model).total_params(); }

namespace {

nlohmann::json peak_json(const PeakFlops& p) {
  return {{"per_core_gflops", p.per_core * 1e-9}, {"cores", p.cores}, {"dtype", std::string(dtype_name(p.dtype))},
          {"origin", p.origin}};
}

}  // namespace

nlohmann::json peak_record(const PeakFlops& peak, int64_t step, double step_gflops) {
  return {{"event", "peak"}, {"step", step}, {"step_gflops", step_gflops}, {"peak_gflops", peak.total() * 1e-9},
          {"peak", peak_json(peak)}};
}

nlohmann::json run_record(Trainer& t, const PeakFlops& peak) {
  const TrainConfig& cfg = t.config();
  const comm::MeshShape mesh = t.context().mesh.shape();
  return {{"event", "run"},
          {"model", cfg.model.describe()},
          {"parameters", whole_model_parameters(cfg)},
          {"flops_per_token", t.flops_per_token()},
          {"layout",
           {{"backend", cfg.comm.backend},
            {"dp", mesh.dp},
            {"tp", mesh.tp},
            {"pp", mesh.pp},
            {"cp", mesh.cp},
            {"zero_stage", cfg.parallel.zero_stage},
            {"grad_reduce", parallel::to_string(cfg.parallel.grad_reduce)},
            {"micro_batch", cfg.training.micro_batch},
            {"grad_accum", cfg.training.grad_accum},
            {"seq_len", cfg.data.seq_len},
            {"mode", cfg.data.mode},
            {"threads_per_rank", compute_threads()}}},
          {"precision", precision_json(t)},
          {"peak_gflops", peak.total() * 1e-9},
          {"peak", peak_json(peak)},
          {"start_step", t.steps_done()},
          {"total_steps", cfg.training.steps}};
}

TrainProgress::TrainProgress(Trainer& t, std::FILE* console, MetricsWriter& writer)
    : line_(console), writer_(writer), total_steps_(t.config().training.steps) {
  const auto& tr = t.config().training;
  stop_step_ = tr.stop_at > 0 ? tr.stop_at : tr.steps;
  // The cores the job computes on: every rank's compute threads (on the
  // threads backend the ranks share this process's cores).
  const bool threads_backend = comm::parse_backend(t.config().comm.backend) == comm::Backend::Threads;
  const int cores = job_cores(threads_backend, t.context().world_size, compute_threads(), hardware_cores());
  busy_cores_ = std::min(cores, hardware_cores());
  peak_ = peak_flops(t.precision().compute, cores, busy_cores_);
  writer.write(run_record(t, peak_));
}

std::string TrainProgress::status_text(const StepMetrics& m, double eta_s) const {
  char buf[256];
  const double tps = m.tokens_per_s;
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | %.*f%s tok/s | MFU %.1f%% | ETA %s | peak %s",
                static_cast<long long>(m.step), static_cast<long long>(total_steps_), m.loss, tps >= 1e4 ? 1 : 0,
                tps >= 1e4 ? tps * 1e-3 : tps, tps >= 1e4 ? "k" : "", 100.0 * mfu(m), format_duration(eta_s).c_str(),
                format_bytes(m.memory.total_peak).c_str());
  return buf;
}

void TrainProgress::step_done(const StepMetrics& m) {
  if (m.gflops * 1e9 > peak_.total()) {
    // The peak was measured low (a loaded machine, a faster kernel since):
    // measure it again and never let it stay below a rate seen.
    const double before = peak_.total();
    peak_ = raise_peak(peak_, busy_cores_, m.gflops * 1e9, m.step);
    writer_.write(peak_record(peak_, m.step, m.gflops));
    char buf[256];
    std::snprintf(buf, sizeof buf, "note: step %lld ran at %.1f GFLOP/s, above the MFU peak of %.1f: peak now %.1f GFLOP/s (%s)",
                  static_cast<long long>(m.step), m.gflops, before * 1e-9, peak_.total() * 1e-9, peak_.origin.c_str());
    line_.print(buf);
  }
  if (!line_.live()) return;
  // ETA from the steps after the first of this run (it pays warm-up).
  const auto now = std::chrono::steady_clock::now();
  double eta = -1;
  if (first_timed_step_ < 0) {
    first_timed_step_ = m.step;
    first_timed_ = now;
  } else {
    const double per_step = std::chrono::duration<double>(now - first_timed_).count() /
                            double(m.step - first_timed_step_);
    eta = per_step * double(stop_step_ - m.step);
  }
  line_.update(status_text(m, eta));
}

}  // namespace meshtrain::train
