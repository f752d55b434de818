// `meshtrain train` and `meshtrain verify`.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::app {

struct TrainRequest {
  std::string config;                  // TOML file
  std::vector<std::string> overrides;  // section.key=value
};
// Runs the configured job; its log goes to stdout (rank 0).
void train(const TrainRequest& request);

struct VerifyRequest {
  std::string config, layout;  // layout: "dp=4,zero=3"
  std::vector<std::string> overrides;
  int steps = 3;
  double tolerance = 1e-4;
  bool bitwise = false;  // identical bits instead of a tolerance
};
struct VerifyResult {
  bool pass = false;
  std::string report;
};
// Runs `steps` updates in the layout and on one rank and compares them.
VerifyResult verify(const VerifyRequest& request);

}  // namespace meshtrain::app
