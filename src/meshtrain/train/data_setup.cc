#include "meshtrain/train/data_setup.h"

#include <cstdio>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/data/corpus_reader.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::train {

data::LoaderConfig loader_config(const DataConfig& d, int64_t seq_multiple) {
  data::LoaderConfig c;
  c.mode = data::parse_batch_mode(d.mode);
  c.seq_len = d.seq_len;
  c.seed = d.seed;
  c.bucket_pool = d.bucket_pool;
  c.seq_multiple = seq_multiple;
  return c;
}

void ensure_prepared(const DataConfig& d) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(d.path) / "meta.json")) {
    // A dataset prepared with another tokenizer than data.tokenizer names.
    const nlohmann::json have = data::read_dataset_meta(d.path).value("tokenizer", nlohmann::json::object());
    const std::string want = d.tokenizer.empty() ? "byte" : "sentencepiece";
    MT_REQUIRE(ConfigError, have.value("type", "") == want, "data.path = '", d.path, "' was prepared with the ",
               have.value("type", "?"), " tokenizer but data.tokenizer asks for ", want,
               "; give the run its own data.path");
    if (!d.tokenizer.empty())
      MT_REQUIRE(ConfigError,
                 have.value("sha256", "") == data::SentencePieceTokenizer::from_file(d.tokenizer)->sha256(),
                 "data.path = '", d.path, "' was prepared with another tokenizer than data.tokenizer = '",
                 d.tokenizer, "'; give the run its own data.path");
    return;
  }
  MT_REQUIRE(DataError, !d.sources.empty(), "data.path = '", d.path,
             "' holds no prepared dataset (no meta.json) and data.sources is empty: run "
             "`meshtrain data prepare --out ", d.path, " INPUT...` or set data.sources");
  data::PrepareOptions o;
  o.inputs = d.sources;
  o.out_dir = d.path;
  o.format = data::parse_input_format(d.format);
  o.val_fraction = d.val_fraction;
  o.seed = d.seed;
  std::unique_ptr<data::Tokenizer> tok = std::make_unique<data::ByteTokenizer>();
  if (!d.tokenizer.empty()) {
    MT_REQUIRE(ConfigError, fs::exists(d.tokenizer), "data.tokenizer = '", d.tokenizer,
               "' does not exist: train one with `meshtrain tokenizer train --out ", d.tokenizer, " INPUT...`");
    tok = data::SentencePieceTokenizer::from_file(d.tokenizer);
  }
  const auto r = data::prepare_dataset(o, *tok);
  std::printf("prepared %s: %lld documents (%lld train / %lld val), %lld + %lld tokens in %.2f s\n",
              r.out_dir.c_str(), static_cast<long long>(r.documents), static_cast<long long>(r.train_documents),
              static_cast<long long>(r.val_documents), static_cast<long long>(r.train_tokens),
              static_cast<long long>(r.val_tokens), r.seconds);
}

}  // namespace meshtrain::train
