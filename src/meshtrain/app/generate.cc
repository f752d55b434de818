#include "meshtrain/app/generate.h"

#include "meshtrain/app/model_source.h"
#include "meshtrain/checkpoint/generate.h"
#include "meshtrain/train/memory_estimate.h"

namespace meshtrain::app {

std::string generate(const GenerateRequest& q) {
  const ModelSource src = ModelSource::open(q.from);
  const auto tok = src.tokenizer();
  // The model whole on one process, run over up to max_seq_len positions.
  train::check_available_memory(train::estimate_model_memory(src.config(), 1, src.config().max_seq_len), 1, stderr,
                                "generate holds the whole model in one process: use a machine with more memory");
  auto model = src.build_model();
  checkpoint::GenerateOptions o;
  o.max_new_tokens = q.tokens;
  o.temperature = q.temperature;
  o.top_k = q.top_k;
  o.top_p = q.top_p;
  o.seed = q.seed;
  o.stop_id = tok->eos_id();
  std::vector<int32_t> ids = {tok->bos_id()};
  for (int32_t id : tok->encode(q.prompt)) ids.push_back(id);
  std::vector<int32_t> out = checkpoint::generate(*model, ids, o);
  // Ids the tokenizer does not know (a model vocabulary larger than the
  // tokenizer's) cannot be printed; drop them.
  std::erase_if(out, [&](int32_t id) { return id >= tok->vocab_size(); });
  return q.prompt + tok->decode(out);
}

}  // namespace meshtrain::app
