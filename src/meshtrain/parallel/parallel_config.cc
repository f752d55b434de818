#include "meshtrain/parallel/parallel_config.h"

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
}

}  // namespace meshtrain::parallel
