#include "meshtrain/core/rng.h"

#include <cmath>

namespace meshtrain {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c[0];
    const uint64_t p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

std::array<uint32_t, 4> CounterRng::bits(uint64_t stream, uint64_t index) const {
  return philox4x32({uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32)},
                    {uint32_t(seed_), uint32_t(seed_ >> 32)});
}

float CounterRng::uniform(uint64_t stream, uint64_t index) const {
  return float(bits(stream, index)[0] >> 8) * (1.0f / 16777216.0f);
}

float CounterRng::normal(uint64_t stream, uint64_t index) const {
  const auto b = bits(stream, index);
  const double u1 = (double(b[0]) + 1.0) / 4294967297.0;  // (0, 1]
  const double u2 = double(b[1]) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t stream_id(const char* name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (; *name; ++name) h = (h ^ uint8_t(*name)) * 1099511628211ull;
  return h;
}

}  // namespace meshtrain
