// `meshtrain plan` without a config, in the seed's terms (SPEC S3, S5, S7,
// S10): state memory per rank (29.7)-(29.10) and the peak on top of it for
// N parameters, a precision and a sharding layout; the checkpoint interval
// of (29.5); the micro-batches a pipeline needs for a target bubble
// (29.14); speedup and efficiency of two measured runs (29.17). Each part is
// printed when its options are given.
#pragma once

#include <optional>
#include <string>

namespace meshtrain::plan {

struct SeedTerms {
  // (29.7)-(29.10)
  std::optional<double> params;  // N
  std::string precision = "bf16";
  int dp = 1, zero_stage = 0, tp = 1, pp = 1;
  double activations = 0, workspace = 0, gathered = 0, prefetch = 0;
  std::optional<double> device_memory;
  // (29.5)
  std::optional<int64_t> recompute_layers;
  std::optional<double> activation_unit;
  // (29.14)
  std::optional<int> pipeline_stages;
  std::optional<double> target_bubble;
  // (29.17): t0, D0, t1, D1
  std::optional<std::string> scaling;
};

// ConfigError naming the option when an input is out of range or a part
// lacks its partner option (--recompute-layers without --activation-unit).
std::string seed_terms_report(const SeedTerms& t);

}  // namespace meshtrain::plan
