// The global gradient norm of SPEC S2 / Algorithm 29.1 step 5: the sum of
// squares of the reduced gradient over the unique logical parameters (a
// copy the layout plan does not count — a tensor-parallel replica, a shared
// KV piece on all but its first rank — adds nothing), summed in a canonical
// order: blocks of kNormBlock elements of each padded unit (never straddling
// two ZeRO owners), gathered over the data-parallel group in global block
// order, then over the model-parallel ranks (pipeline stages, tensor-
// parallel ranks) unit by unit, ranks in order within a unit. ZeRO stage
// changes alone and pipeline splits alone are therefore bitwise identical.
#pragma once

#include <functional>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/parallel/layout_plan.h"

namespace meshtrain::parallel {

// owned_grad(u): this rank's reduced gradient of its owned range of unit u.
// Collective over `data` (when ZeRO shards gradients' owners) and `model`.
double global_grad_sum_squares(const LayoutPlan& plan, const std::function<Tensor(int)>& owned_grad,
                               comm::ProcessGroup& data, comm::ProcessGroup& model);

}  // namespace meshtrain::parallel
