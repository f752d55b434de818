// Tensor-parallel communication of one step, for the metrics: what the
// regions moved (per collective, in total and per block), the partial
// gradients summed over tp ranks, and the time spent in them (blocking,
// so all of it exposed).
#pragma once

#include <array>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "meshtrain/model/regions.h"
#include "meshtrain/parallel/tp_grad_sums.h"

namespace meshtrain::train {

struct TpMetrics {
  int64_t calls = 0;
  // Bytes this rank sent on a ring (docs/math.md (M.22)), by collective (model::TpCollective).
  std::array<int64_t, model::kNumTpCollectives> ring_bytes{};
  // Per block (mean over the blocks this rank holds): logical message bytes
  // and ring bytes by collective.
  std::array<int64_t, model::kNumTpCollectives> layer_message_bytes{}, layer_ring_bytes{};
  int64_t grad_sum_bytes = 0;  // partial gradients summed over tp ranks (message bytes)
  double seconds = 0;          // waited for in regions and gradient sums: exposed
  double overlapped_seconds = 0;  // regions' sums in flight behind the weight gradients (docs/math.md (M.78))
  nlohmann::json to_json() const;
};

TpMetrics tp_metrics(const model::TpCommStats& regions, const parallel::TpGradSumStats& sums, int n_layers);

}  // namespace meshtrain::train
