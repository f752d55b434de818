// Deterministic, resumable document order. Epoch e visits every document
// once in a permutation that is a pure function of (seed, e): documents are
// sorted by a Philox key drawn at (stream "data.sampler" + e, index). The
// position is (epoch, cursor), so a checkpoint stores three integers.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshtrain::data {

struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t cursor = 0;  // documents already taken in this epoch
  bool operator==(const SamplerState&) const = default;
};
void to_json(nlohmann::json& j, const SamplerState& s);
void from_json(const nlohmann::json& j, SamplerState& s);  // DataError on missing/mistyped fields

class DocumentSampler {
 public:
  // shuffle=false visits 0..n-1 in order every epoch. max_epochs=0 means
  // endless; otherwise next() returns -1 once that many epochs are done.
  DocumentSampler(int64_t num_documents, uint64_t seed, bool shuffle = true, int64_t max_epochs = 0);

  // Next document index, or -1 when the epoch limit is reached.
  int64_t next();
  SamplerState state() const { return state_; }
  // DataError if the state does not fit this sampler (other seed, cursor
  // beyond the epoch).
  void restore(const SamplerState& s);

  int64_t num_documents() const { return n_; }
  bool exhausted() const { return max_epochs_ > 0 && state_.epoch >= max_epochs_; }
  // The permutation of `epoch` (exposed for tests and tools).
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  const std::vector<int64_t>& perm_for(int64_t epoch);
  int64_t n_;
  bool shuffle_;
  int64_t max_epochs_;
  SamplerState state_;
  std::vector<int64_t> perm_;
  int64_t perm_epoch_ = -1;
};

}  // namespace meshtrain::data
