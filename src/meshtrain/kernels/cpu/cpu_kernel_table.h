// The host's KernelTable (cpu_kernel_table.cc): each entry checks the
// tensors and calls the typed kernels of cpu/ for their dtype.
#pragma once

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::kernels {

const KernelTable& cpu_kernel_table();

// Whether the host's gemm_block_tree runs these operands in one kernel
// (f32 throughout, the packed f32 GEMM active: packed_gemm_f32_tree). The
// meta device's table answers the same, so the planner sees the leaves the
// host then never allocates.
bool cpu_gemm_block_tree_runs(const std::vector<KernelTable::BlockTerm>& terms, const Tensor& c);

}  // namespace meshtrain::kernels
