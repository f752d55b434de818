// The pre-run memory check of a training run: the trainer's own step
// recorded on the meta device (meta_step.h), one per rank class as
// `meshtrain plan` groups them (plan/prediction.h), so the figures are the
// peaks a real rank's MemoryTracker reaches (docs/planning.md, "The meta
// device"), compared with what this machine has left (core/memory_limits.h)
// before anything is allocated. The ranks that share this machine's memory
// are every rank of the process (threads backend) or, under mpirun, the
// ranks started on this node, each assumed to need what this rank needs.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/core/memory_limits.h"
#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// What one class of ranks needs: `ranks` of them, each reaching `peak`.
struct ClassPeak {
  std::string name;  // "pp 0 tp 1" (its representative's coordinates) or "rank 3"
  int ranks = 1;
  MemorySnapshot peak;
};

// Every rank class of cfg's layout (dp 0 counts as 1) with its count: the
// ranks one process runs under the threads backend.
std::vector<ClassPeak> layout_peaks(const TrainConfig& cfg);
// `rank`'s own recorded step, counted for the `local_ranks` ranks of the job
// on this machine (mpirun: cfg.parallel.dp is the world's).
ClassPeak rank_peak(const TrainConfig& cfg, int rank, int local_ranks);

// What a training run can change when it does not fit.
inline constexpr const char* kTrainingMemoryRemedy =
    "Use a smaller model or micro-batch, a higher parallel.zero_stage, training.recompute = true, more ranks on "
    "other machines, or training.check_memory = false to start anyway (`meshtrain plan` shows the same figures)";

// The sum of the classes' peaks against `available`: ConfigError naming
// each class's peak and its categories when it does not fit, a warning
// line above 80%, "" else (core/memory_limits.h).
std::string check_run_budget(const std::vector<ClassPeak>& classes, const AvailableMemory& available);

// Unless cfg.training.check_memory is false: the threads backend's check
// (every rank of the layout in this process), before it launches them.
void check_run_memory(const TrainConfig& cfg, std::FILE* console);
// The same for one rank started by mpirun, `local_ranks` on this machine.
void check_rank_memory(const TrainConfig& cfg, int rank, int local_ranks, std::FILE* console);

}  // namespace meshtrain::train
