// `meshtrain scale`: a short strong- or weak-scaling series on this machine
// (train/scaling.h): the table, and scaling.svg and scaling.json on disk.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::app {

struct ScaleRequest {
  std::string config;
  std::vector<std::string> layouts;  // "dp=1", "dp=2,zero=1", "tp=2", ...
  std::vector<std::string> overrides;
  int steps = 3;             // measured steps per layout (after one warm-up step)
  bool weak = false;         // each replica keeps the config's B and G
  int threads_per_rank = 0;  // 0: every layout on the same threads (this process's cores); else a device's threads
  std::string hardware;      // a machine profile: the predicted step beside the measured one
  std::string out;           // "": <metrics.run_dir>/scale
};
struct ScaleResult {
  std::string table;
  std::string out;           // the directory holding scaling.svg and scaling.json
  bool any_ran = false;      // at least one layout ran (the baseline exists)
};
ScaleResult scale(const ScaleRequest& request);

}  // namespace meshtrain::app
