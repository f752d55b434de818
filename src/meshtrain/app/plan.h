// `meshtrain plan`: the layout plan of a config, nothing runs.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::app {

struct PlanRequest {
  std::string config;
  std::string layout;  // "dp=2,zero=1,tp=2,pp=2"; "": the config's [parallel] section
  std::vector<std::string> overrides;
};
// Every parameter's placement per mesh axis, its local shape on each
// tensor-parallel rank, the axes its gradient is summed over and its bytes
// per rank, then each rank's persistent bytes; with pipeline stages, each
// stage's segments and predicted cost.
std::string plan(const PlanRequest& request);

}  // namespace meshtrain::app
