// `meshtrain plan CONFIG --devices D`: every legal mesh of D devices
// (D = pp * dp * cp * tp; ep, for MoE models, carved out of dp * cp and never
// multiplied into D) and ZeRO stage, each predicted with the global
// batch of the config held fixed (R * B * G rows, split_window), ranked by
// predicted step time among those whose peak
// fits the device memory. A mesh the model cannot be placed on (heads not
// whole per tensor-parallel rank, more stages than blocks, a batch that
// does not divide) is listed with the reason. cp is tried where the
// sequence splits into 2 cp chunks.
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

// record: the train layer's meta-device step (prediction.h).
std::vector<MeshCandidate> search_meshes(const StepInputs& base, int devices, const HardwareProfile* hw,
                                         const StepRecorder& record);
std::string render_search(const std::vector<MeshCandidate>& candidates, int devices, const HardwareProfile* hw);
// Rank 0's group along each axis of size > 1: "tp {0,1} dp {0,2,4,6}".
std::string describe_groups(const comm::MeshShape& mesh);

}  // namespace meshtrain::plan
