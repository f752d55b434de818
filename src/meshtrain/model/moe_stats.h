// What the mixture-of-experts layers routed since the last reset (the
// step's metrics, docs/moe.md): per MoE block, kept tokens per expert,
// assignments and drops, and the aux loss SUM (divide by the step's N).
#pragma once

#include <cstdint>
#include <vector>

namespace meshtrain::model {

struct MoeLayerStats {
  int64_t layer = 0;
  std::vector<int64_t> tokens;  // kept assignments per expert
  int64_t assigned = 0, dropped = 0;
  double aux_sum = 0.0;
  int64_t a2a_bytes = 0;  // bytes this rank sent in the dispatch / combine all-to-alls
};

struct MoeStats {
  std::vector<MoeLayerStats> layers;  // MoE blocks in order
  MoeLayerStats* find(int64_t layer) {
    for (auto& l : layers)
      if (l.layer == layer) return &l;
    return nullptr;
  }
  void reset() {
    for (auto& l : layers) l = MoeLayerStats{l.layer, std::vector<int64_t>(l.tokens.size(), 0)};
  }
  double aux_sum() const {
    double s = 0;
    for (const auto& l : layers) s += l.aux_sum;
    return s;
  }
};

}  // namespace meshtrain::model
