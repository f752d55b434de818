#include "meshtrain/app/version.h"

#include <oneapi/dnnl/dnnl.h>

#include <exception>
#include <string>

#include "meshtrain/app/git_version.h"  // generated at build time (cmake/git_version.cmake)
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::app {
namespace {

// What the CPU offers, from cpuid (GCC's __builtin_cpu_supports).
std::string cpu_isa() {
  __builtin_cpu_init();
  std::string s;
  if (__builtin_cpu_supports("avx512f")) s = "avx512";
  else if (__builtin_cpu_supports("avx2")) s = "avx2";
  else if (__builtin_cpu_supports("avx")) s = "avx";
  else s = "sse";
  if (__builtin_cpu_supports("avx512bf16")) s += "+bf16";
  if (__builtin_cpu_supports("amx-tile")) s += "+amx";
  if (__builtin_cpu_supports("fma")) s += " (fma)";
  return s;
}

// The value, or the error a bad MESHTRAIN_ISA / MESHTRAIN_GEMM raises: the
// version still prints, naming the variable to fix.
template <typename F>
std::string or_error(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

VersionInfo version_info() {
  VersionInfo v;
  v.version = MESHTRAIN_VERSION;
  v.git_commit = MESHTRAIN_GIT_COMMIT;
  v.build_type = MESHTRAIN_BUILD_TYPE;
  v.isa_kernels = or_error([] { return kernels::isa_description(); });
  v.isa_cpu = cpu_isa();
  v.cpu_model = kernels::cpu_model_name();
  v.gemm = or_error([] {
    return kernels::gemm_description() + " (f32: " + kernels::gemm_impl_name(kernels::active_gemm_impl()) +
           ", MESHTRAIN_GEMM chooses; bf16: " + kernels::bf16_gemm_name() + ")";
  });
  const dnnl_version_t* d = dnnl_version();
  v.onednn = std::to_string(d->major) + "." + std::to_string(d->minor) + "." + std::to_string(d->patch) + " (" +
             d->hash + ")";
  v.mpi = comm::mpi_library_version();
  return v;
}

std::string version_text(const VersionInfo& v) {
  return "meshtrain " + v.version + "\n" +
         "git commit: " + v.git_commit + "\n" +
         "build type: " + v.build_type + "\n" +
         "kernels: " + v.isa_kernels + ", chosen at run time (MESHTRAIN_ISA caps it)\n" +
         "CPU: " + v.cpu_model + ", " + v.isa_cpu + "\n" +
         "GEMM: " + v.gemm + "\n" +
         "oneDNN: " + v.onednn + "\n" +
         "MPI: " + v.mpi + "\n";
}

}  // namespace meshtrain::app
