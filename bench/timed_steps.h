// The step loop of the end-to-end benchmarks that run the trainer on the
// threads backend (tp_bench, cp_bench, moe_bench): one warm-up step (primitives,
// allocator cache), then `steps` steps in lock step over the world, each
// rank's medians of the step time, of the communication it waited for and
// of computed positions per second.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "meshtrain/comm/parallel_context.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct StepMedians {
  double step_s = 0, exposed_s = 0, tokens_per_s = 0;
  train::StepMetrics last;  // the last step's metrics (communication counters, memory peaks)
};

// exposed: the waiting time a layout's step reports (its collectives' share).
inline StepMedians timed_steps(comm::ParallelContext& ctx, train::Trainer& t, int steps,
                               const std::function<double(const train::StepMetrics&)>& exposed) {
  std::vector<double> times, waits, tokens;
  StepMedians r;
  for (int s = 0; s < steps + 1; ++s) {
    ctx.world->barrier();
    r.last = t.step();
    if (s == 0) continue;
    times.push_back(r.last.seconds);
    waits.push_back(exposed(r.last));
    tokens.push_back(double(r.last.computed_positions) / r.last.seconds);
  }
  r.step_s = median(times);
  r.exposed_s = median(waits);
  r.tokens_per_s = median(tokens);
  return r;
}

}  // namespace meshtrain::bench
