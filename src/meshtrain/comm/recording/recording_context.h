// One rank of a mesh of any size as a context whose groups record
// (recording_group.h) and whose allocator is the meta device's: what the
// planner builds a rank's real trainer on (docs/planning.md).
#pragma once

#include "meshtrain/comm/parallel_context.h"
#include "meshtrain/comm/recording/recording_group.h"

namespace meshtrain::comm {

// completion_lag: see RecordingGroup.
ParallelContext recording_context(const MeshShape& shape, int rank, int completion_lag);

}  // namespace meshtrain::comm
