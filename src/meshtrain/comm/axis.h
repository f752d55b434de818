// The axes of the device mesh (mesh.h) as types: pp, dp, cp and tp multiply
// into the world (tp innermost); ep and edp are carved out of dp x cp (the
// ranks sharing tokens with each other's experts, and the replicas of the
// same experts) and never multiply into it. A set of axes names a group:
// the ranks that agree on every axis outside the set.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::comm {

enum class Axis : uint8_t { Pp, Dp, Cp, Tp, Ep, Edp };
inline constexpr int kNumAxes = 6;
// The axes whose sizes multiply into the world, outer to inner.
inline constexpr std::array<Axis, 4> kWorldAxes = {Axis::Pp, Axis::Dp, Axis::Cp, Axis::Tp};

std::string_view axis_name(Axis a);  // "pp", "dp", "cp", "tp", "ep", "edp"
std::optional<Axis> find_axis(std::string_view name);

class Axes {
 public:
  constexpr Axes() = default;
  constexpr Axes(Axis a) : bits_(uint8_t(1u << unsigned(a))) {}  // NOLINT: an axis is a set of one
  constexpr Axes(std::initializer_list<Axis> axes) {
    for (Axis a : axes) bits_ = uint8_t(bits_ | (1u << unsigned(a)));
  }
  constexpr bool has(Axis a) const { return (bits_ >> unsigned(a)) & 1u; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr uint8_t bits() const { return bits_; }
  constexpr Axes operator|(Axes o) const { return from_bits(uint8_t(bits_ | o.bits_)); }
  constexpr bool operator==(const Axes&) const = default;
  constexpr bool operator<(const Axes& o) const { return bits_ < o.bits_; }
  // "pp+tp": the names joined in axis order (the group's name).
  std::string key() const;
  // The inverse of key(); ConfigError naming the axes for an unknown name.
  static Axes parse(std::string_view key);
  static constexpr Axes from_bits(uint8_t bits) {
    Axes a;
    a.bits_ = bits;
    return a;
  }

 private:
  uint8_t bits_ = 0;
};

constexpr Axes operator|(Axis a, Axis b) { return Axes(a) | Axes(b); }

// A rank's coordinate on every axis.
struct MeshCoords {
  std::array<int, kNumAxes> at{};
  int& operator[](Axis a) { return at[size_t(a)]; }
  int operator[](Axis a) const { return at[size_t(a)]; }
};

}  // namespace meshtrain::comm
