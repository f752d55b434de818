// The meta device's KernelTable: every kernel computes nothing. Tensors on
// the meta device have sizes and no values (core/meta_memory.h); host
// outputs a kernel returns are the neutral values the step's control flow
// needs (a loss sum of 0 over the true count of supervised targets, finite
// gradients, a sum of squares of 0) and MoE routing is the planner's
// balanced assumption (moe_routing.h). `meshtrain plan` runs a rank's real
// step on it (docs/planning.md).
#pragma once

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::kernels {

const KernelTable& meta_kernel_table();

}  // namespace meshtrain::kernels
