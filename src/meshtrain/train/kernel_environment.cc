#include "meshtrain/train/kernel_environment.h"

#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::train {

nlohmann::json kernel_environment() {
  return {{"isa", kernels::isa_name(kernels::active_isa())},
          {"cpu", kernels::cpu_model_name()},
          {"gemm", kernels::gemm_library_version()},
          {"threads", compute_threads()}};
}

std::string kernel_environment_change(const nlohmann::json& recorded) {
  if (!recorded.is_object()) return "";  // written before the record existed: nothing to compare
  const nlohmann::json now = kernel_environment();
  const std::pair<const char*, const char*> fields[] = {{"isa", "kernel ISA"}, {"cpu", "CPU"}, {"gemm", "GEMM library"}};
  for (const auto& [key, what] : fields) {
    const std::string was = recorded.value(key, std::string()), is = now.at(key).get<std::string>();
    if (was != is) return std::string(what) + " " + was + " -> " + is;
  }
  // Only the AVX-512 kernels (and oneDNN's AVX-512 GEMM) give the same bits
  // for every thread count.
  const int was = recorded.value("threads", 0), is = now.at("threads").get<int>();
  if (now.at("isa") != "avx512" && was != is)
    return "compute threads " + std::to_string(was) + " -> " + std::to_string(is) + " below AVX-512";
  return "";
}

}  // namespace meshtrain::train
