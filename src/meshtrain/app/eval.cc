#include "meshtrain/app/eval.h"

#include "meshtrain/app/model_source.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/corpus_reader.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/train/memory_estimate.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::app {
namespace {

data::TokenDataset text_dataset(const EvalRequest& q, const ModelSource& src) {
  std::vector<std::vector<int32_t>> docs;
  const auto tok = src.tokenizer();
  for (const auto& file : data::expand_inputs({q.text}, data::parse_input_format(q.format)))
    data::for_each_document(file, [&](std::string_view doc) { docs.push_back(tok->encode_document(doc)); });
  MT_REQUIRE(DataError, !docs.empty(), "eval: no documents in ", q.text);
  return data::TokenDataset::from_documents(docs, src.tokenizer());
}

}  // namespace

EvalReport evaluate(const EvalRequest& q) {
  MT_REQUIRE(ConfigError, q.data.empty() != q.text.empty(), "eval needs exactly one of --data DIR or --text FILE");
  MT_REQUIRE(ConfigError, q.split == "val" || q.split == "validation" || q.split == "train", "eval: --split '",
             q.split, "' is not a split (val or train)");
  const ModelSource src = ModelSource::open(q.from);
  // Settings the checkpoint was trained with, so that by default eval
  // measures what train's validation did.
  const nlohmann::json meta = src.metadata();
  const nlohmann::json data_meta = meta.value("data", nlohmann::json::object());
  const nlohmann::json layout = meta.value("layout", nlohmann::json::object());

  train::TrainConfig cfg;
  cfg.model = src.config();
  cfg.parallel.dp = 1;
  cfg.data.path = q.text.empty() ? q.data : q.text;  // only named in messages
  cfg.data.seq_len = q.seq_len > 0 ? q.seq_len : data_meta.value("seq_len", src.config().max_seq_len);
  cfg.data.mode = !q.mode.empty() ? q.mode : data_meta.value("mode", std::string("packed"));
  // Validation rows do not depend on the window size, so any batch reads
  // the rows training's layout read (Trainer::evaluate).
  cfg.training.micro_batch = q.batch > 0 ? q.batch : layout.value("micro_batch", int64_t(8));
  const nlohmann::json policy = meta.value("precision", nlohmann::json::object());
  cfg.training.precision = !q.precision.empty() ? q.precision : policy.value("policy", std::string("fp32"));
  cfg.precision().validate();
  cfg.training.eval_rows = q.rows;

  const std::string split = q.split == "train" ? "train" : "val";
  data::TokenDataset held_out = q.text.empty() ? data::TokenDataset::open(q.data, split) : text_dataset(q, src);
  MT_REQUIRE(ConfigError, held_out.tokenizer().describe() == src.tokenizer_description(), "eval: ",
             q.text.empty() ? q.data : q.text, " was tokenized with ",
             data::tokenizer_summary(held_out.tokenizer().describe()).dump(), " but ", q.from, " was trained with ",
             data::tokenizer_summary(src.tokenizer_description()).dump());
  MT_REQUIRE(DataError, held_out.num_documents() > 0, "eval: the ", split, " split of ", q.data, " is empty");

  train::check_available_memory(train::estimate_rank_memory(cfg, 1), 1, stderr,
                                "Evaluate with a smaller --batch or --seq-len, or on a machine with more memory");
  train::EvalResult r;
  comm::launch_threads(1, [&](comm::ParallelContext& ctx) {
    // The trainer needs a training split to exist; it never steps here.
    train::Trainer t(cfg, ctx, held_out, held_out);
    src.load_weights(t.model());
    r = t.evaluate();
  });
  EvalReport e;
  e.source = q.from;
  e.data = q.text.empty() ? q.data + " (" + split + ")" : q.text;
  e.seq_len = cfg.data.seq_len;
  e.batch = cfg.training.micro_batch;
  e.mode = cfg.data.mode;
  e.precision = cfg.training.precision;
  e.loss_sum = r.loss_sum;
  e.supervised = r.targets;
  e.target_bytes = r.target_bytes;
  e.nats_per_token = r.loss;
  e.bits_per_byte = r.bits_per_byte();
  return e;
}

}  // namespace meshtrain::app
