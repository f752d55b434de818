// A test machine profile whose every GEMM runs at 1 TFLOP/s and memory at
// 100 GB/s, with no fixed costs (a rank's compute time is its FLOPs and
// bytes over two rates), and links given per test: devices per node, the
// intra- and inter-node link as "alpha_us = A\nbandwidth_gbps = B\n..."
// (hardware.h).
#pragma once

#include <string>

#include "meshtrain/plan/hardware.h"

namespace meshtrain::testing {

inline plan::HardwareProfile flat_machine(int devices = 8, const std::string& intra = "alpha_us = 1\nbandwidth_gbps = 100\n",
                                          const std::string& inter = "alpha_us = 1\nbandwidth_gbps = 100\n") {
  return plan::parse_hardware(R"(
name = "flat"
source = "a test machine"
[device]
memory = "64GiB"
memory_bandwidth_gbps = 100
peak_tflops = { fp32 = 1.0 }
[gemm]
fp32 = [{ min_dim = 1, tflops = 1.0 }]
[node]
devices = )" + std::to_string(devices) + "\n[link.intra]\n" + intra + "[link.inter]\n" + inter,
                              "flat.toml");
}

}  // namespace meshtrain::testing
