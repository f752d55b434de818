#include "meshtrain/plan/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

double parse_bytes(const std::string& text, const std::string& what) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  MT_REQUIRE(ConfigError, end != s && std::isfinite(v), what, " = \"", text,
             "\": expected a size such as 4096, 512MiB or 1.5GiB");
  MT_REQUIRE(ConfigError, v >= 0, what, " = \"", text, "\": a size cannot be negative");
  std::string unit;
  for (const char* p = end; *p; ++p)
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += char(std::toupper(static_cast<unsigned char>(*p)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  MT_REQUIRE(ConfigError, scale > 0, what, " = \"", text, "\": unknown unit (B, KiB, MiB, GiB or TiB)");
  return v * scale;
}

double parse_count(const std::string& text, const std::string& what) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  MT_REQUIRE(ConfigError, end != s && std::isfinite(v), what, " = \"", text, "\": expected a count such as 1.7B");
  MT_REQUIRE(ConfigError, v >= 0, what, " = \"", text, "\": a count cannot be negative");
  const std::string suffix(end);
  double scale = 0;
  if (suffix.empty()) scale = 1;
  else if (suffix == "K" || suffix == "k") scale = 1e3;
  else if (suffix == "M") scale = 1e6;
  else if (suffix == "B" || suffix == "G") scale = 1e9;
  else if (suffix == "T") scale = 1e12;
  MT_REQUIRE(ConfigError, scale > 0, what, " = \"", text, "\": unknown suffix (K, M, B or T)");
  return v * scale;
}

std::string gib(double bytes) {
  char buf[48];
  const double g = bytes / (1024.0 * 1024 * 1024);
  if (std::abs(g) >= 1.0) std::snprintf(buf, sizeof buf, "%.2f GiB", g);
  else std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024));
  return buf;
}

}  // namespace meshtrain::plan
