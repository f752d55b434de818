// The whole model's parameters (or reduced gradients) as one vector in
// global order — the units of the global spec, parameters in storage order,
// every tensor whole — assembled from the local boxes of every rank, each
// logical element from the one copy the layout plan counts. Comparing any
// layout with one rank (verify, equivalence tests) reads this.
#pragma once

#include <vector>

#include "meshtrain/parallel/data_parallel.h"

namespace meshtrain::parallel {

// Collective over the engine's data-parallel group and `model_group` (the
// plan's model axes: pp, tp). grads: after finish_grads().
std::vector<double> gather_global_values(DataParallel& engine, comm::ProcessGroup& model_group, bool grads);

}  // namespace meshtrain::parallel
