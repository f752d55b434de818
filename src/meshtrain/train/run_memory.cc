#include "meshtrain/train/run_memory.h"

#include <algorithm>

#include "meshtrain/plan/prediction.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"

namespace meshtrain::train {

namespace {

// "peak 1.20 GiB (params 300 MiB, grads ...)": the step's peak, then each
// category at its own peak (so they may add up to more).
std::string describe(const MemorySnapshot& s) {
  std::string by_category;
  for (int c = 0; c < kNumMemCategories; ++c)
    if (s.peak[size_t(c)] > 0)
      by_category += (by_category.empty() ? "" : ", ") + std::string(mem_category_name(MemCategory(c))) + " " +
                     format_bytes(s.peak[size_t(c)]);
  return "peak " + format_bytes(s.total_peak) + " (" + by_category + ")";
}

}  // namespace

std::vector<ClassPeak> layout_peaks(const TrainConfig& cfg) {
  // The classes of `meshtrain plan`, each recorded from this very config
  // (the trainer's own normalization of it, TrainingStep's runnable()).
  const plan::StepRecorder record = [&cfg](const plan::StepInputs&, int rank, int lag) {
    return record_step(cfg, rank, lag);
  };
  const plan::Prediction p = plan::predict(step_inputs(cfg), record, nullptr, /*brackets=*/false);
  std::vector<ClassPeak> out;
  for (const plan::RankClass& c : p.classes)
    out.push_back({"pp " + std::to_string(c.pp) + " tp " + std::to_string(c.tp), c.step.count, c.step.peak});
  return out;
}

ClassPeak rank_peak(const TrainConfig& cfg, int rank, int local_ranks) {
  return {"rank " + std::to_string(rank), std::max(1, local_ranks), record_step(cfg, rank).peak};
}

namespace {

struct Need {
  int64_t bytes = 0;
  std::string what;
};

Need need_of(const std::vector<ClassPeak>& classes) {
  Need n;
  int ranks = 0;
  for (const ClassPeak& c : classes) {
    n.bytes += c.peak.total_peak * c.ranks;
    ranks += c.ranks;
    n.what += (n.what.empty() ? "" : "; ") + c.name + (c.ranks > 1 ? " x " + std::to_string(c.ranks) : "") + ": " +
              describe(c.peak);
  }
  n.what = "predicted memory per rank (the training step recorded on the meta device): " + n.what;
  if (ranks > 1) n.what += "; " + std::to_string(ranks) + " ranks here = " + format_bytes(n.bytes);
  return n;
}

void check_here(const std::vector<ClassPeak>& classes, std::FILE* console) {
  const Need n = need_of(classes);
  check_available_memory(n.bytes, n.what, console, kTrainingMemoryRemedy);
}

}  // namespace

std::string check_run_budget(const std::vector<ClassPeak>& classes, const AvailableMemory& available) {
  const Need n = need_of(classes);
  return check_memory_budget(n.bytes, n.what, available, kTrainingMemoryRemedy);
}

void check_run_memory(const TrainConfig& cfg, std::FILE* console) {
  if (cfg.training.check_memory) check_here(layout_peaks(cfg), console);
}

void check_rank_memory(const TrainConfig& cfg, int rank, int local_ranks, std::FILE* console) {
  if (cfg.training.check_memory) check_here({rank_peak(cfg, rank, local_ranks)}, console);
}

}  // namespace meshtrain::train
