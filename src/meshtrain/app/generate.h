// `meshtrain generate`: sample text from a checkpoint or safetensors export.
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::app {

struct GenerateRequest {
  std::string from, prompt;
  int64_t tokens = 64;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: whole vocabulary
  double top_p = 1.0;        // nucleus sampling; 1: off
  uint64_t seed = 0;
};
// The prompt followed by the sampled continuation (the same seed gives the
// same text).
std::string generate(const GenerateRequest& request);

}  // namespace meshtrain::app
