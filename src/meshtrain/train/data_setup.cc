#include "meshtrain/train/data_setup.h"

#include <cstdio>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/data/corpus_reader.h"
#include "meshtrain/data/prepare.h"

namespace meshtrain::train {

data::LoaderConfig loader_config(const DataConfig& d) {
  data::LoaderConfig c;
  c.mode = data::parse_batch_mode(d.mode);
  c.seq_len = d.seq_len;
  c.seed = d.seed;
  c.bucket_pool = d.bucket_pool;
  return c;
}

void ensure_prepared(const DataConfig& d) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(d.path) / "meta.json")) return;
  MT_REQUIRE(DataError, !d.sources.empty(), "data.path = '", d.path,
             "' holds no prepared dataset (no meta.json) and data.sources is empty: run "
             "`meshtrain data prepare --out ", d.path, " INPUT...` or set data.sources");
  data::PrepareOptions o;
  o.inputs = d.sources;
  o.out_dir = d.path;
  o.format = data::parse_input_format(d.format);
  o.val_fraction = d.val_fraction;
  o.seed = d.seed;
  const auto r = data::prepare_dataset(o);
  std::printf("prepared %s: %lld documents (%lld train / %lld val), %lld + %lld tokens in %.2f s\n",
              r.out_dir.c_str(), static_cast<long long>(r.documents), static_cast<long long>(r.train_documents),
              static_cast<long long>(r.val_documents), static_cast<long long>(r.train_tokens),
              static_cast<long long>(r.val_tokens), r.seconds);
}

}  // namespace meshtrain::train
