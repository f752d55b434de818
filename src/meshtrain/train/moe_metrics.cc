#include "meshtrain/train/moe_metrics.h"

#include <algorithm>

namespace meshtrain::train {

MoeMetrics moe_metrics(const model::MoeStats& stats, const model::ModelConfig& cfg, int64_t tokens, int64_t N,
                       int64_t b_e, bool expert_parallel, comm::ProcessGroup& dp, comm::ProcessGroup* pp) {
  MoeMetrics m;
  if (cfg.n_experts == 0) return m;
  m.active = true;
  const size_t E = size_t(cfg.n_experts);
  // [assigned, dropped, aux sum, a2a bytes, MoE blocks, tokens per expert...]
  std::vector<double> v(5 + E, 0.0);
  for (const auto& l : stats.layers) {
    v[0] += double(l.assigned);
    v[1] += double(l.dropped);
    v[2] += l.aux_sum;
    v[3] += double(l.a2a_bytes);
    v[4] += 1;
    for (size_t e = 0; e < l.tokens.size() && e < E; ++e) v[5 + e] += double(l.tokens[e]);
  }
  const double blocks_here = v[4];
  dp.all_reduce(v.data(), v.size(), DType::F64);
  v[4] = blocks_here;  // every dp rank holds the same blocks
  if (pp) pp->all_reduce(v.data(), v.size(), DType::F64);
  m.assigned = int64_t(v[0]);
  m.dropped = int64_t(v[1]);
  m.drop_fraction = m.assigned ? double(m.dropped) / double(m.assigned) : 0.0;
  m.aux_loss = N ? v[2] / double(N) : 0.0;
  m.a2a_bytes = int64_t(v[3]);
  if (expert_parallel)
    m.a2a_formula_bytes = 2.0 * double(tokens) * double(cfg.experts_top_k) * double(cfg.d_model) * double(b_e) * v[4];
  double kept = 0, most = 0;
  for (size_t e = 0; e < E; ++e) {
    m.expert_tokens.push_back(int64_t(v[5 + e]));
    kept += v[5 + e];
    most = std::max(most, v[5 + e]);
  }
  m.max_expert_share = kept > 0 ? most / kept : 0.0;
  return m;
}

nlohmann::json MoeMetrics::to_json() const {
  return {{"assigned", assigned},
          {"dropped", dropped},
          {"drop_fraction", drop_fraction},
          {"aux_loss", aux_loss},
          {"expert_tokens", expert_tokens},
          {"max_expert_share", max_expert_share},
          {"a2a_bytes", a2a_bytes},
          {"a2a_formula_bytes", a2a_formula_bytes}};
}

}  // namespace meshtrain::train
