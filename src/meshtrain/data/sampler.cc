#include "meshtrain/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {

void to_json(nlohmann::json& j, const SamplerState& s) {
  j = {{"seed", s.seed}, {"epoch", s.epoch}, {"cursor", s.cursor}};
}

void from_json(const nlohmann::json& j, SamplerState& s) {
  try {
    s.seed = j.at("seed").get<uint64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.cursor = j.at("cursor").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(DataError, "malformed sampler state ", j.dump(), ": ", e.what());
  }
}

DocumentSampler::DocumentSampler(int64_t num_documents, uint64_t seed, bool shuffle, int64_t max_epochs)
    : n_(num_documents), shuffle_(shuffle), max_epochs_(max_epochs) {
  MT_REQUIRE(DataError, num_documents > 0, "cannot sample from a dataset with no documents");
  MT_REQUIRE(ConfigError, max_epochs >= 0, "max_epochs must be >= 0");
  state_.seed = seed;
}

std::vector<int64_t> DocumentSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), 0);
  if (!shuffle_) return p;
  // Sort by 64-bit random keys (ties broken by index): O(n log n) per epoch,
  // independent of how earlier epochs were consumed.
  const CounterRng rng(state_.seed);
  const uint64_t stream = stream_id("data.sampler") + uint64_t(epoch);
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) {
    const auto b = rng.bits(stream, uint64_t(i));
    keyed[size_t(i)] = {(uint64_t(b[0]) << 32) | b[1], i};
  }
  std::sort(keyed.begin(), keyed.end());
  for (int64_t i = 0; i < n_; ++i) p[size_t(i)] = keyed[size_t(i)].second;
  return p;
}

const std::vector<int64_t>& DocumentSampler::perm_for(int64_t epoch) {
  if (perm_epoch_ != epoch) {
    perm_ = permutation(epoch);
    perm_epoch_ = epoch;
  }
  return perm_;
}

int64_t DocumentSampler::next() {
  if (exhausted()) return -1;
  const int64_t doc = perm_for(state_.epoch)[size_t(state_.cursor)];
  if (++state_.cursor == n_) {
    state_.cursor = 0;
    ++state_.epoch;
  }
  return doc;
}

void DocumentSampler::restore(const SamplerState& s) {
  MT_REQUIRE(DataError, s.seed == state_.seed, "sampler state has seed ", s.seed, " but the loader uses seed ",
             state_.seed);
  MT_REQUIRE(DataError, s.epoch >= 0 && s.cursor >= 0 && s.cursor < n_, "sampler state epoch ", s.epoch,
             " cursor ", s.cursor, " does not fit a dataset of ", n_, " documents");
  state_ = s;
}

}  // namespace meshtrain::data
