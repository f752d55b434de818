// A machine profile for planner tests: every GEMM at 1 TFLOP/s (fp32), no
// fixed costs, `devices` a node, and the two links as given.
#pragma once

#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/hardware.h"

namespace meshtrain::testing {

struct TestLinks {
  double intra_alpha_us = 1, intra_gbps = 100, inter_alpha_us = 1, inter_gbps = 100;
};

// The profile's TOML text (for a file a config names) and the profile.
inline std::string test_machine_toml(const std::string& name, int devices, bool shared, const TestLinks& l) {
  return detail::concat("name = \"", name, R"("
source = "a test machine"
[device]
memory = "64GiB"
memory_bandwidth_gbps = 100
peak_tflops = { fp32 = 1.0 }
[gemm]
fp32 = [{ min_dim = 1, tflops = 1.0 }]
[node]
devices = )", devices, "\nshared = ", shared ? "true" : "false", R"(
[link.intra]
alpha_us = )", l.intra_alpha_us, "\nbandwidth_gbps = ", l.intra_gbps, R"(
[link.inter]
alpha_us = )", l.inter_alpha_us, "\nbandwidth_gbps = ", l.inter_gbps, "\n");
}
inline plan::HardwareProfile test_machine(const std::string& name, int devices, bool shared, const TestLinks& l) {
  return plan::parse_hardware(test_machine_toml(name, devices, shared, l), name + ".toml");
}

}  // namespace meshtrain::testing
