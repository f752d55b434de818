// What decides the bits of a step besides the layout (docs/math.md, "Rule:
// restore claims"): the kernels' ISA level, the CPU model (oneDNN picks its
// GEMM kernels by it), the GEMMs (kernels::gemm_description(): which f32 GEMM
// with its blocking, and the oneDNN version) and, with oneDNN's f32 GEMM
// below AVX-512, the compute thread count (its AVX2 GEMM splits K by team
// size). Checkpoints record it; a bitwise claim is made only when it matches.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace meshtrain::train {

// {"isa", "cpu", "gemm", "f32_gemm", "threads"} of this process (f32_gemm:
// kernels::gemm_impl_name of the f32 GEMM that runs).
nlohmann::json kernel_environment();

// "" when `recorded` (a checkpoint's record; null for checkpoints that
// predate it) gives the same bits as `now` (kernel_environment() of the
// resuming process), else what changed, e.g. "kernel ISA avx512 -> avx2".
std::string kernel_environment_change(const nlohmann::json& recorded, const nlohmann::json& now);
// The same, against this process.
std::string kernel_environment_change(const nlohmann::json& recorded);

}  // namespace meshtrain::train
