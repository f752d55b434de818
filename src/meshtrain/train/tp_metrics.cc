#include "meshtrain/train/tp_metrics.h"

namespace meshtrain::train {

TpMetrics tp_metrics(const model::TpCommStats& regions, const parallel::TpGradSumStats& sums, int n_layers) {
  TpMetrics m;
  int blocks = 0;
  for (int l = 0; l < n_layers && l + 1 < regions.num_segments(); ++l) blocks += regions.segment_total(l + 1).calls > 0;
  for (int c = 0; c < model::kNumTpCollectives; ++c) {
    const auto kind = model::TpCollective(c);
    const auto total = regions.total(kind);
    m.calls += total.calls;
    m.ring_bytes[size_t(c)] = total.ring_bytes;
    m.seconds += total.seconds;
    m.overlapped_seconds += total.overlapped_seconds;
    int64_t msg = 0, ring = 0;
    for (int l = 0; l < n_layers && l + 1 < regions.num_segments(); ++l) {
      msg += regions.at(l + 1, kind).message_bytes;
      ring += regions.at(l + 1, kind).ring_bytes;
    }
    if (blocks > 0) {
      m.layer_message_bytes[size_t(c)] = msg / blocks;
      m.layer_ring_bytes[size_t(c)] = ring / blocks;
    }
  }
  m.grad_sum_bytes = sums.bytes;
  m.seconds += sums.seconds;
  return m;
}

nlohmann::json TpMetrics::to_json() const {
  nlohmann::json ring, layer, layer_ring;
  for (int c = 0; c < model::kNumTpCollectives; ++c) {
    const char* name = model::to_string(model::TpCollective(c));
    ring[name] = ring_bytes[size_t(c)];
    layer[name] = layer_message_bytes[size_t(c)];
    layer_ring[name] = layer_ring_bytes[size_t(c)];
  }
  return {{"calls", calls},
          {"ring_bytes", ring},
          {"per_layer_message_bytes", layer},
          {"per_layer_ring_bytes", layer_ring},
          {"grad_sum_bytes", grad_sum_bytes},
          {"seconds", seconds},
          {"overlapped_seconds", overlapped_seconds}};
}

}  // namespace meshtrain::train
