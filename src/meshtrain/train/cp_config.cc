#include "meshtrain/train/cp_config.h"

#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

void check_context_parallel_config(const TrainConfig& cfg) {
  const int cp = cfg.parallel.cp;
  if (cp == 1) return;
  const int64_t chunks = 2 * int64_t(cp), T = cfg.data.seq_len, max = cfg.model.max_seq_len;
  MT_REQUIRE(ConfigError, chunks <= max, "parallel.cp = ", cp, " cuts every row into 2 x ", cp, " = ", chunks,
             " chunks, more than the model's model.max_seq_len = ", max, " positions: use parallel.cp <= ", max / 2);
  // A suggestion the model can take: the next multiple up to max_seq_len, else the one below.
  const int64_t up = (T + chunks - 1) / chunks * chunks, suggested = up <= max ? up : T / chunks * chunks;
  MT_REQUIRE(ConfigError, T % chunks == 0, "parallel.cp = ", cp, " cuts every row into 2 x ", cp, " = ", chunks,
             " chunks (rank r holds chunks r and ", chunks - 1, " - r), but data.seq_len = ", T, " does not split (",
             T, " % ", chunks, " = ", T % chunks, "); use a multiple of ", chunks, " such as ", suggested);
  const int64_t m = sequence_multiple(cfg);
  MT_REQUIRE(ConfigError, T % m == 0, "parallel.cp = ", cp, " with parallel.sequence_parallel over parallel.tp = ",
             cfg.parallel.tp, " needs data.seq_len to be a multiple of 2 x cp x tp = ", m, " (", T, " % ", m, " = ",
             T % m, ")");
}

int64_t sequence_multiple(const TrainConfig& cfg) {
  const int64_t sp = cfg.parallel.sequence_parallel ? cfg.parallel.tp : 1;
  const int64_t m = sp * (cfg.parallel.cp > 1 ? 2 * int64_t(cfg.parallel.cp) : 1);
  // Reproducible mode: the same tokens on every layout, every row cut into
  // 2 C chunks, whole canonical token blocks under any sequence split
  // (docs/math.md (M.74)).
  return cfg.training.reproducible ? std::lcm(m, 2 * int64_t(cfg.training.reproducible_blocks)) : m;
}

}  // namespace meshtrain::train
