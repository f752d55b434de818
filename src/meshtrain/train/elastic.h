// Elastic membership (docs/comm.md, "Elastic membership"): a job that
// loses ranks continues on the survivors at the largest runnable layout,
// and grows back at a step boundary when capacity returns. The objective
// stays the same: the global window (dp x grad_accum micro-batches) and
// every model axis (tp, cp, pp, ep) are kept, only dp and grad_accum trade
// places — with uneven counts per replica where that shortens the step
// (docs/math.md (M.75)) — so in reproducible mode every membership is the
// same update bit for bit (docs/math.md (M.10)-(M.11)).
//
// Capacity, the ranks the job may use now: the count in the run
// directory's `capacity` file when one is there (a scheduler or an operator
// writes it; it may go up or down), else what the job had less the ranks
// that died (threads backend) or the launcher's count (mpirun).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// A runnable layout on `ranks` ranks for a config's global window.
struct ElasticLayout {
  int ranks = 0;            // dp x cp x tp x pp
  int64_t dp = 0;
  int64_t grad_accum = 0;   // the largest replica's count
  std::vector<int64_t> replica_grad_accum;  // each replica's when uneven (else empty)
  std::string describe() const;  // "4 ranks: dp=2, grad_accum=2", "3 ranks: dp=3, grad_accum=3+3+2"
  // The --set assignments that run a config at this layout.
  std::vector<std::string> overrides() const;
};

// The fastest layout on at most `ranks` ranks that keeps cfg's global
// window and model axes and passes the config's own checks (ep dividing
// dp x cp, ...): the fewest micro-batches on the busiest replica, then the
// fewest ranks, so a window of 8 on 3 replicas runs 3 + 3 + 2 and one of 4
// runs 2 + 2 on 2 of them. Uneven counts go to the first replicas. nullopt
// when none fits or it would have fewer than comm.min_ranks ranks.
std::optional<ElasticLayout> largest_layout(const TrainConfig& cfg, int ranks);

// cfg run at `layout` (dp and grad_accum set; validated).
TrainConfig at_layout(const TrainConfig& cfg, const ElasticLayout& layout);

// "4 ranks: dp=4, grad_accum=1 -> 2 ranks: dp=2, grad_accum=2", or "" when
// `to` is `from`: a membership change as the logs and metrics show it.
std::string describe_change(const ElasticLayout& from, const ElasticLayout& to);

// The layout cfg runs at now.
ElasticLayout current_layout(const TrainConfig& cfg);

// <metrics.run_dir>/capacity.
std::string capacity_file(const TrainConfig& cfg);

// The capacity file's count, or `otherwise` when there is no file.
// ConfigError naming the file when it holds anything but a positive count.
int read_capacity(const TrainConfig& cfg, int otherwise);

// After a failure or at a step boundary: the layout to continue at with
// `capacity` ranks. CommError naming the capacity, comm.min_ranks and the
// smallest layout when nothing runnable is left.
ElasticLayout shrink_or_grow(const TrainConfig& cfg, int capacity, const std::string& why);

}  // namespace meshtrain::train
