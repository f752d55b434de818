#include "meshtrain/parallel/parallel_config.h"

#include <algorithm>
#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

const char* to_string(GradReduce r) { return r == GradReduce::Sum ? "sum" : "avg"; }

double loss_coefficient(GradReduce reduce, int replicas, int64_t N) {
  return (reduce == GradReduce::Avg ? double(replicas) : 1.0) / double(N);
}

void ParallelConfig::validate() const {
  MT_REQUIRE(ConfigError, dp >= 0, "parallel.dp = ", dp, ": expected >= 1 (or 0: the world size under mpirun)");
  MT_REQUIRE(ConfigError, zero_stage >= 0 && zero_stage <= 3, "parallel.zero_stage = ", zero_stage,
             ": expected 0, 1, 2 or 3");
  MT_REQUIRE(ConfigError, bucket_mb > 0, "parallel.bucket_mb = ", bucket_mb, ": expected > 0");
  MT_REQUIRE(ConfigError, tp >= 1, "parallel.tp = ", tp, ": expected >= 1");
  MT_REQUIRE(ConfigError, cp >= 1, "parallel.cp = ", cp, ": expected >= 1");
  MT_REQUIRE(ConfigError, pp >= 1, "parallel.pp = ", pp, ": expected >= 1 pipeline stages");
  MT_REQUIRE(ConfigError, virtual_stages >= 1, "parallel.virtual_stages = ", virtual_stages, ": expected >= 1");
  if (replica_grad_accum.empty()) return;
  MT_REQUIRE(ConfigError, int64_t(replica_grad_accum.size()) == dp, "parallel.replica_grad_accum holds ",
             replica_grad_accum.size(), " counts for parallel.dp = ", dp, ": give one per data-parallel replica");
  for (const int64_t g : replica_grad_accum)
    MT_REQUIRE(ConfigError, g >= 1, "parallel.replica_grad_accum holds ", g,
               ": every replica runs at least one micro-batch per update");
}

int64_t replica_micro_batches(const ParallelConfig& cfg, int d, int64_t grad_accum) {
  return cfg.replica_grad_accum.empty() ? grad_accum : cfg.replica_grad_accum.at(size_t(d));
}

int64_t replica_first_micro_batch(const ParallelConfig& cfg, int d, int64_t grad_accum) {
  int64_t first = 0;
  for (int e = 0; e < d; ++e) first += replica_micro_batches(cfg, e, grad_accum);
  return first;
}

std::string describe_grad_accum(const std::vector<int64_t>& replica_grad_accum, int64_t grad_accum,
                                const std::string& separator) {
  if (replica_grad_accum.empty()) return std::to_string(grad_accum);
  std::string text;
  for (const int64_t g : replica_grad_accum) text += (text.empty() ? "" : separator) + std::to_string(g);
  return text;
}

int64_t largest_micro_batches(const std::vector<int64_t>& replica_grad_accum, int64_t grad_accum) {
  return replica_grad_accum.empty() ? grad_accum : *std::max_element(replica_grad_accum.begin(), replica_grad_accum.end());
}

int64_t window_micro_batches(int64_t dp, const std::vector<int64_t>& replica_grad_accum, int64_t grad_accum) {
  return replica_grad_accum.empty() ? dp * grad_accum
                                    : std::accumulate(replica_grad_accum.begin(), replica_grad_accum.end(), int64_t(0));
}

int64_t window_micro_batches(const ParallelConfig& cfg, int64_t grad_accum) {
  return window_micro_batches(cfg.dp, cfg.replica_grad_accum, grad_accum);
}

std::vector<model::LeafSpan> data_group_spans(const ParallelConfig& cfg) {
  std::vector<model::LeafSpan> spans;
  for (int d = 0; d < int(cfg.replica_grad_accum.size()); ++d)
    for (int c = 0; c < cfg.cp; ++c)
      spans.push_back({replica_first_micro_batch(cfg, d, 0), c == 0 ? cfg.replica_grad_accum[size_t(d)] : 0});
  return spans;
}

}  // namespace meshtrain::parallel
