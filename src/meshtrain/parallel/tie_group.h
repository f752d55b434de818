// The group of the pipeline ranks holding copies of a tied weight (the
// layout plan's tie_stages(): the embedding's first stage and the LM
// head's stage), over which the weight's gradient is summed after the
// data-parallel reduction.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::parallel {

// Collective over `pp` (every pipeline rank calls it with the same stages):
// the group of `stages` in their order, null for the other ranks and when
// `stages` is empty.
std::shared_ptr<comm::ProcessGroup> make_tie_group(comm::ProcessGroup* pp, const std::vector<int>& stages);

}  // namespace meshtrain::parallel
