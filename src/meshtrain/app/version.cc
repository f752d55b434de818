#include "meshtrain/app/version.h"

#include <oneapi/dnnl/dnnl.h>

#include "meshtrain/app/git_version.h"  // generated at build time (cmake/git_version.cmake)
#include "meshtrain/comm/mpi_world.h"

namespace meshtrain::app {
namespace {

// The vector ISA the compiler targeted (-march).
std::string compiled_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__AVX__)
  return "avx";
#else
  return "sse";
#endif
}

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

}  // namespace

VersionInfo version_info() {
  VersionInfo v;
  v.version = MESHTRAIN_VERSION;
  v.git_commit = MESHTRAIN_GIT_COMMIT;
  v.build_type = MESHTRAIN_BUILD_TYPE;
  v.isa_compiled = compiled_isa();
  v.isa_cpu = cpu_isa();
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
         "ISA: built for " + v.isa_compiled + ", this CPU has " + v.isa_cpu + "\n" +
         "oneDNN: " + v.onednn + "\n" +
         "MPI: " + v.mpi + "\n";
}

}  // namespace meshtrain::app
