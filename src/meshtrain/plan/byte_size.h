// Sizes on the command line and in hardware files: plain bytes or a number
// with a binary unit (B, KiB, MiB, GiB, TiB; K/M/G/T and KB/MB/GB/TB are read
// as the binary units too), and sizes printed in GiB (MiB below 1 GiB).
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::plan {

// ConfigError naming `what` (the option or key) for a negative, malformed
// or unknown-unit size.
double parse_bytes(const std::string& text, const std::string& what);
std::string gib(double bytes);  // "33.00 GiB", "512.00 MiB"
// A count such as a number of parameters: plain, or with a decimal suffix
// K, M, B (billions) or T ("1.7B", "175B"); ConfigError naming `what`.
double parse_count(const std::string& text, const std::string& what);

}  // namespace meshtrain::plan
