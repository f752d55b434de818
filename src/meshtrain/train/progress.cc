#include "meshtrain/train/progress.h"

#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/fma_peak.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

nlohmann::json precision_json(const Trainer& t) {
  const PrecisionPolicy& p = t.precision();
  auto name = [](DType d) { return std::string(dtype_name(d)); };
  return {{"params", name(p.params)},         {"compute", name(p.compute)},
          {"grad_accumulate", name(p.grad_accum)}, {"grad_reduce", name(p.grad_reduce)},
          {"master", name(p.master)},         {"optimizer_state", name(p.optimizer)}};
}

nlohmann::json run_record(Trainer& t, double peak_gflops) {
  const TrainConfig& cfg = t.config();
  const comm::MeshShape mesh = t.context().mesh.shape();
  return {{"event", "run"},
          {"model", cfg.model.describe()},
          {"parameters", t.model_spec().total_params()},
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
          {"peak_gflops", peak_gflops},
          {"start_step", t.steps_done()},
          {"total_steps", cfg.training.steps}};
}

TrainProgress::TrainProgress(Trainer& t, std::FILE* console, MetricsWriter& writer)
    : line_(console), total_steps_(t.config().training.steps) {
  const auto& tr = t.config().training;
  stop_step_ = tr.stop_at > 0 ? tr.stop_at : tr.steps;
  // Every rank has its own compute threads (threads backend: cores / ranks),
  // so the job's peak is one rank's times the number of ranks.
  peak_gflops_ = kernels::measure_fma_peak_gflops(compute_threads(), 2'000'000) * double(t.context().world_size);
  writer.write(run_record(t, peak_gflops_));
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
