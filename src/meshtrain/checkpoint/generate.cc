#include "meshtrain/checkpoint/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

int32_t sample_token(std::span<const float> logits, const Sampling& sampling, const CounterRng& rng,
                     uint64_t position) {
  const double temperature = sampling.temperature;
  MT_REQUIRE(ConfigError, !logits.empty(), "sample_token: empty logits");
  MT_REQUIRE(ConfigError, temperature >= 0, "temperature must be >= 0, got ", temperature);
  MT_REQUIRE(ConfigError, sampling.top_p > 0 && sampling.top_p <= 1, "top-p must be in (0, 1], got ", sampling.top_p);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  if (temperature == 0) return *std::min_element(ids.begin(), ids.end(), better);
  const int64_t top_k = sampling.top_k;
  size_t k = top_k > 0 ? std::min<size_t>(size_t(top_k), ids.size()) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), better);  // the k most likely, in order
  ids.resize(k);
  const double top = logits[size_t(ids[0])];
  std::vector<double> w(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) total += w[i] = std::exp((double(logits[size_t(ids[i])]) - top) / temperature);
  if (sampling.top_p < 1) {
    // The fewest most likely tokens whose probabilities reach top_p.
    double mass = 0;
    size_t keep = 0;
    while (keep < k && mass < sampling.top_p * total) mass += w[keep++];
    k = std::max<size_t>(1, keep);
    total = mass > 0 ? mass : w[0];
  }
  const double u = double(rng.uniform(stream_id("generate"), position)) * total;
  double acc = 0;
  for (size_t i = 0; i < k; ++i) {
    acc += w[i];
    if (u < acc) return ids[i];
  }
  return ids[k - 1];
}

std::vector<int32_t> generate(model::Transformer& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options) {
  const auto& cfg = model.config();
  MT_REQUIRE(ConfigError, !prompt.empty(), "generate: empty prompt (start with BOS)");
  for (int32_t id : prompt)
    MT_REQUIRE(ConfigError, id >= 0 && id < cfg.vocab_size, "generate: prompt token ", id, " outside the vocabulary");
  const CounterRng rng(options.seed);
  std::vector<int32_t> seq = prompt, out;
  std::vector<int32_t> tokens, targets, positions;
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const size_t n = std::min<size_t>(seq.size(), size_t(cfg.max_seq_len));
    tokens.assign(seq.end() - long(n), seq.end());
    targets.assign(n, -1);
    positions.resize(n);
    std::iota(positions.begin(), positions.end(), 0);
    const model::TokenBatch batch{1, int64_t(n), tokens.data(), targets.data(), positions.data(), nullptr};
    const Tensor logits = model.forward_logits(batch);
    const float* last = logits.data<float>() + (n - 1) * size_t(cfg.vocab_size);
    const int32_t id = sample_token(std::span<const float>(last, size_t(cfg.vocab_size)), options, rng,
                                    uint64_t(seq.size()));
    seq.push_back(id);
    out.push_back(id);
    if (id == options.stop_id) break;
  }
  return out;
}

}  // namespace meshtrain::checkpoint
