// Counter-based RNG (Philox 4x32-10). A value is a pure function of
// (seed, stream, index): no state to carry, so dropout masks replay exactly
// under recomputation and parameter init is identical under any sharding
// (a shard draws the global indices it owns).
#pragma once

#include <array>
#include <cstdint>

namespace meshtrain {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class CounterRng {
 public:
  explicit CounterRng(uint64_t seed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  // Four independent 32-bit words for (stream, index).
  std::array<uint32_t, 4> bits(uint64_t stream, uint64_t index) const;
  // Uniform in [0, 1) (24-bit mantissa resolution, as f32).
  float uniform(uint64_t stream, uint64_t index) const;
  // Standard normal (Box-Muller on two words of the same counter).
  float normal(uint64_t stream, uint64_t index) const;

 private:
  uint64_t seed_;
};

// Stable 64-bit hash for naming streams (e.g. by parameter name).
uint64_t stream_id(const char* name);

}  // namespace meshtrain
