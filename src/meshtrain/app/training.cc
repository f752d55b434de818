#include "meshtrain/app/training.h"

#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/run.h"

namespace meshtrain::app {

void train(const TrainRequest& r) { train::train_main(train::load_config(r.config, r.overrides)); }

VerifyResult verify(const VerifyRequest& r) {
  const train::TrainConfig cfg = train::load_config(r.config, r.overrides);
  train::ensure_prepared(cfg.data);
  const auto data = data::TokenDataset::open(cfg.data.path, "train");
  const auto report = train::compare_with_single_rank(cfg, train::parse_layout(r.layout), r.steps, data, r.tolerance,
                                                     r.bitwise);
  return {report.pass(), report.str()};
}

}  // namespace meshtrain::app
