// The global gradient norm of SPEC S2 / Algorithm 29.1 step 5: the sum of
// squares of the reduced gradient over the unique logical parameters (a
// copy the layout plan does not count — a tensor-parallel replica, a shared
// KV piece on all but its first rank — adds nothing), summed in a canonical
// order: blocks of kNormBlock elements of each padded unit (never straddling
// two ZeRO owners), gathered over the data-parallel group in global block
// order, then over the model-parallel ranks (pipeline stages, tensor-
// parallel ranks) unit by unit, ranks in order within a unit. ZeRO stage
// changes alone and pipeline splits alone are therefore bitwise identical.
// Routed experts' units (held by their owners only) are summed the same
// way over their own groups — the expert-data-parallel group, then the
// model ranks and the expert-parallel ranks — and added to the dense sum.
#pragma once

#include <functional>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

// owned_grad(u): this rank's reduced gradient of its owned range of unit u.
// Collective over each unit's group (when ZeRO shards gradients' owners),
// `model` and, when the plan has expert units, `expert_model` (the model
// ranks times the expert-parallel ranks: every holder of some expert).
double global_grad_sum_squares(const LayoutPlan& plan, const std::function<Tensor(int)>& owned_grad,
                               const UnitGroups& groups, comm::ProcessGroup& model,
                               comm::ProcessGroup& expert_model);

}  // namespace meshtrain::parallel
