// `meshtrain plan CONFIG --devices D`: every legal mesh of D devices
// (D = pp * dp * tp, S9) and ZeRO stage, each predicted with the global
// batch of the config held fixed (R * B * G rows, split_window), ranked by
// predicted step time among those whose peak
// fits the device memory. A mesh the model cannot be placed on (heads not
// whole per tensor-parallel rank, more stages than blocks, a batch that
// does not divide) is listed with the reason. Context and expert axes are
// not enumerated: neither executes yet (cp) and dense models have no
// experts (ep would be carved from dp x cp, never multiplied into D).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshtrain/plan/prediction.h"

namespace meshtrain::plan {

struct MeshCandidate {
  StepInputs inputs;
  int64_t global_rows = 0;  // the config's window, which every mesh is evaluated at
  std::optional<Prediction> prediction;
  std::string rejected;  // why the mesh cannot run this model and batch
};

std::vector<MeshCandidate> search_meshes(const StepInputs& base, int devices, const HardwareProfile* hw);
std::string render_search(const std::vector<MeshCandidate>& candidates, int devices, const HardwareProfile* hw);
// Rank 0's group along each axis of size > 1: "tp {0,1} dp {0,2,4,6}".
std::string describe_groups(const comm::MeshShape& mesh);

}  // namespace meshtrain::plan
