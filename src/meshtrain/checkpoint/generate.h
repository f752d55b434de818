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

// How one token is drawn: the logits over `temperature`, then the `top_k`
// most likely tokens, then of those the fewest most likely whose
// probabilities sum to at least `top_p` (nucleus sampling), renormalized.
struct Sampling {
  double temperature = 1.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: whole vocabulary
  double top_p = 1.0;        // in (0, 1]; 1: no nucleus cut
};

struct GenerateOptions : Sampling {
  int64_t max_new_tokens = 64;
  uint64_t seed = 0;
  int32_t stop_id = -1;      // stop after emitting this id (e.g. EOS); -1: never
};

// Token id drawn from `logits`; ties break to the lower id. ConfigError for
// a negative temperature or a top_p outside (0, 1].
int32_t sample_token(std::span<const float> logits, const Sampling& sampling, const CounterRng& rng,
                     uint64_t position);

// Returns only the new tokens (ending with stop_id when it was drawn).
std::vector<int32_t> generate(model::Transformer& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options);

}  // namespace meshtrain::checkpoint
