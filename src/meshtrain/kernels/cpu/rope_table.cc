// RoPE cos/sin table (rope.h), built once per model on the baseline ISA;
// rope_apply itself is in per_isa/rope.cc.
#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/rope.h"

namespace meshtrain::kernels {

RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta) {
  MT_REQUIRE(ConfigError, head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even, got ", head_dim);
  MT_REQUIRE(ConfigError, max_pos > 0, "rope: max_pos must be positive, got ", max_pos);
  MT_REQUIRE(ConfigError, theta > 0, "rope: theta must be positive, got ", theta);
  RopeTable t;
  t.max_pos = max_pos;
  t.half = head_dim / 2;
  t.cos.resize(size_t(max_pos * t.half));
  t.sin.resize(size_t(max_pos * t.half));
  t.cos64.resize(size_t(max_pos * t.half));
  t.sin64.resize(size_t(max_pos * t.half));
  for (int64_t i = 0; i < t.half; ++i) {
    // Angles in double: at long positions float angles lose several digits.
    const double inv_freq = std::pow(theta, -2.0 * double(i) / double(head_dim));
    for (int64_t p = 0; p < max_pos; ++p) {
      const double a = double(p) * inv_freq;
      const size_t at = size_t(p * t.half + i);
      t.cos64[at] = std::cos(a);
      t.sin64[at] = std::sin(a);
      t.cos[at] = float(t.cos64[at]);
      t.sin[at] = float(t.sin64[at]);
    }
  }
  return t;
}

}  // namespace meshtrain::kernels
