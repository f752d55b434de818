// Autoregressive sampling from a Transformer (no KV cache: the
// growing sequence, truncated to max_seq_len, is run each step). Sampling is
// reproducible: the uniform draw for the token at sequence position p is
// CounterRng(seed).uniform(stream "generate", p).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "meshtrain/core/rng.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::checkpoint {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: whole vocabulary
  uint64_t seed = 0;
  int32_t stop_id = -1;      // stop after emitting this id (e.g. EOS); -1: never
};

// Token id drawn from `logits` with temperature and top-k; ties break to
// the lower id.
int32_t sample_token(std::span<const float> logits, double temperature, int64_t top_k, const CounterRng& rng,
                     uint64_t position);

// Returns only the new tokens (ending with stop_id when it was drawn).
std::vector<int32_t> generate(model::Transformer& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options);

}  // namespace meshtrain::checkpoint
