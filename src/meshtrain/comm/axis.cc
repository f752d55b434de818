#include "meshtrain/comm/axis.h"

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

namespace {
constexpr std::array<std::string_view, kNumAxes> kNames = {"pp", "dp", "cp", "tp", "ep", "edp"};
}  // namespace

std::string_view axis_name(Axis a) { return kNames[size_t(a)]; }

std::optional<Axis> find_axis(std::string_view name) {
  for (int i = 0; i < kNumAxes; ++i)
    if (kNames[size_t(i)] == name) return Axis(i);
  return std::nullopt;
}

std::string Axes::key() const {
  std::string k;
  for (int i = 0; i < kNumAxes; ++i)
    if (has(Axis(i))) {
      if (!k.empty()) k += '+';
      k += kNames[size_t(i)];
    }
  return k;
}

Axes Axes::parse(std::string_view key) {
  Axes out;
  for (size_t b = 0; b <= key.size();) {
    size_t e = key.find('+', b);
    if (e == std::string_view::npos) e = key.size();
    const std::optional<Axis> a = find_axis(key.substr(b, e - b));
    MT_REQUIRE(ConfigError, a.has_value(), "unknown mesh axis '", key.substr(b, e - b), "' in '", key,
               "' (axes: pp, dp, cp, tp, ep, edp)");
    out = out | *a;
    b = e + 1;
  }
  return out;
}

}  // namespace meshtrain::comm
