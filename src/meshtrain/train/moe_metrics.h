// A step's mixture-of-experts metrics (docs/moe.md), summed over the ranks
// of the window (every rank routes its own rows) and the pipeline stages:
// assignments, drops, the aux loss term of the objective, kept tokens per
// expert (all MoE blocks together), the most loaded expert's share, and the
// all-to-all payload measured against docs/math.md (M.60)'s 2 N k d b_e.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/model/moe_stats.h"

namespace meshtrain::train {

struct MoeMetrics {
  bool active = false;
  int64_t assigned = 0, dropped = 0;
  double drop_fraction = 0;
  double aux_loss = 0;               // aux SUM / N: the term the objective adds to the loss
  std::vector<int64_t> expert_tokens;  // kept assignments per expert, over every MoE block
  double max_expert_share = 0;       // the most loaded expert's share of the kept assignments
  int64_t a2a_bytes = 0;             // dispatch + combine payload sent, all ranks (0 without ep)
  double a2a_formula_bytes = 0;      // 2 N k d b_e per MoE block, N the routed tokens
  nlohmann::json to_json() const;
};

// Collective over `dp` and (when not null) `pp`. tokens: the window's
// routed positions; N: its supervised targets; b_e: bytes per exchanged element.
MoeMetrics moe_metrics(const model::MoeStats& stats, const model::ModelConfig& cfg, int64_t tokens, int64_t N,
                       int64_t b_e, bool expert_parallel, comm::ProcessGroup& dp, comm::ProcessGroup* pp);

}  // namespace meshtrain::train
