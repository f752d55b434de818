// `meshtrain plan` without a config: docs/math.md's closed forms for state
// memory per rank (M.26) and the peak on top of it (M.28) for N parameters, a
// precision and a sharding layout; the checkpoint interval of (M.30); the
// micro-batches a pipeline needs for a target bubble (M.42)-(M.43); speedup
// and efficiency of two measured runs (M.68). Each part is printed when its
// options are given.
#pragma once

#include <optional>
#include <string>

namespace meshtrain::plan {

struct SeedTerms {
  // (M.26)
  std::optional<double> params;  // N
  std::string precision = "bf16";
  int dp = 1, zero_stage = 0, tp = 1, pp = 1;
  double activations = 0, workspace = 0, gathered = 0, prefetch = 0;
  std::optional<double> device_memory;
  // (M.30)
  std::optional<int64_t> recompute_layers;
  std::optional<double> activation_unit;
  // (M.42)-(M.43)
  std::optional<int> pipeline_stages;
  std::optional<double> target_bubble;
  // (M.68): t0, D0, t1, D1
  std::optional<std::string> scaling;
};

// ConfigError naming the option when an input is out of range or a part
// lacks its partner option (--recompute-layers without --activation-unit).
std::string seed_terms_report(const SeedTerms& t);

}  // namespace meshtrain::plan
