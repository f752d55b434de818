// From the [data] config to the data layer: loader settings, and preparing
// the dataset directory from its sources when it holds no dataset yet.
#pragma once

#include "meshtrain/data/loader.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// seq_multiple: padded windows' seq rounded up to it (sequence parallelism).
data::LoaderConfig loader_config(const DataConfig& d, int64_t seq_multiple = 1);
// Prepares d.path from d.sources if d.path has no meta.json; DataError if it
// has none and there are no sources.
void ensure_prepared(const DataConfig& d);

}  // namespace meshtrain::train
