// Where a tensor's memory lives. Kernels are reached through one table per
// device (kernels/kernel_table.h), so another device's kernels can be added
// beside kernels/cpu/ without touching the layers.
#pragma once

#include <cstdint>
#include <string_view>

namespace meshtrain {

// Meta: memory that is sized, rounded and accounted like any device's but
// never touched, and kernels that compute nothing (kernels/meta/): the
// planner runs a rank's real step on it (docs/planning.md).
enum class Device : uint8_t { Cpu, Cuda, Meta };
inline constexpr int kNumDevices = 3;

inline std::string_view device_name(Device d) {
  switch (d) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
    case Device::Meta: return "meta";
  }
  return "?";
}

}  // namespace meshtrain
