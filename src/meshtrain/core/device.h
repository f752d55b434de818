// Where a tensor's memory lives. Kernels are reached through one table per
// device (kernels/kernel_table.h), so another device's kernels can be added
// beside kernels/cpu/ without touching the layers.
#pragma once

#include <cstdint>
#include <string_view>

namespace meshtrain {

enum class Device : uint8_t { Cpu, Cuda };

inline std::string_view device_name(Device d) { return d == Device::Cpu ? "cpu" : "cuda"; }

}  // namespace meshtrain
