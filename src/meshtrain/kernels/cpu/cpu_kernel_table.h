// The host's KernelTable (cpu_kernel_table.cc): each entry checks the
// tensors and calls the typed kernels of cpu/ for their dtype.
#pragma once

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::kernels {

const KernelTable& cpu_kernel_table();

}  // namespace meshtrain::kernels
