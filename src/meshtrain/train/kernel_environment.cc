#include "meshtrain/train/kernel_environment.h"

#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::train {

nlohmann::json kernel_environment() {
  return {{"isa", kernels::isa_name(kernels::active_isa())},
          {"cpu", kernels::cpu_model_name()},
          {"gemm", kernels::gemm_description()},
          {"f32_gemm", kernels::gemm_impl_name(kernels::active_gemm_impl())},
          {"threads", compute_threads()}};
}

std::string kernel_environment_change(const nlohmann::json& recorded, const nlohmann::json& now) {
  // Written before the record existed: nothing to compare.
  if (!recorded.is_object() || !now.is_object()) return "";
  const std::pair<const char*, const char*> fields[] = {{"isa", "kernel ISA"}, {"cpu", "CPU"}, {"gemm", "GEMM library"}};
  for (const auto& [key, what] : fields) {
    const std::string was = recorded.value(key, std::string()), is = now.value(key, std::string());
    if (was != is) return std::string(what) + " " + was + " -> " + is;
  }
  // Every kernel gives the same bits for any thread count except oneDNN's
  // f32 GEMM below AVX-512 (its AVX2 GEMM splits K by team size); the packed
  // GEMM never splits a sum.
  const int was = recorded.value("threads", 0), is = now.value("threads", 0);
  if (now.value("isa", std::string()) != "avx512" &&
      now.value("f32_gemm", std::string()) == kernels::gemm_impl_name(kernels::GemmImpl::kOnednn) && was != is)
    return "compute threads " + std::to_string(was) + " -> " + std::to_string(is) + " below AVX-512 with oneDNN's GEMM";
  return "";
}

std::string kernel_environment_change(const nlohmann::json& recorded) {
  return kernel_environment_change(recorded, kernel_environment());
}

}  // namespace meshtrain::train
