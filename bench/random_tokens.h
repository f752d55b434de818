// Random-token documents over bench-small's 8192-id vocabulary, for the
// end-to-end benchmarks that run the trainer (dp_bench, tp_bench).
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/core/rng.h"
#include "meshtrain/data/dataset.h"

namespace meshtrain::bench {

class RandomVocab final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t>) const override { return {}; }
  int64_t vocab_size() const override { return 8192; }
  int32_t bos_id() const override { return 0; }
  int32_t eos_id() const override { return 1; }
  int32_t pad_id() const override { return 2; }
  int64_t token_bytes(int32_t id) const override { return id > 2 ? 1 : 0; }
  nlohmann::json describe() const override { return {{"type", "random"}, {"vocab_size", 8192}}; }
};

inline data::TokenDataset random_documents(int n, int len) {
  CounterRng rng(7);
  std::vector<std::vector<int32_t>> docs(size_t(n), std::vector<int32_t>(size_t(len), 0));
  for (int d = 0; d < n; ++d)
    for (int i = 0; i < len; ++i) docs[size_t(d)][size_t(i)] = int32_t(3 + rng.bits(uint64_t(d), uint64_t(i))[0] % 8189);
  return data::TokenDataset::from_documents(docs, std::make_unique<RandomVocab>());
}

}  // namespace meshtrain::bench
